// Detached Ed25519 signatures of CMF files (spec §8.2, FORMAT-NOTES §1.17).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace cortiq::cmf {

/// SHA-256 of a whole file (streamed through an mmap). Throws Error(Io).
std::array<uint8_t, 32> sha256_file(const std::string& path);

/// Lowercase hex of bytes.
std::string to_hex(std::span<const uint8_t> b);

/// Loads the 32-byte Ed25519 seed from `key_path` (64 hex chars, whitespace ignored), creating
/// the file (mode 0600) from OS randomness (RAND_bytes) when it does not exist. Throws
/// Error(Io|Parse).
std::array<uint8_t, 32> load_or_create_signing_key(const std::string& key_path);

/// Loads the 32-byte Ed25519 seed of an existing key file (64 hex chars, whitespace ignored).
/// Throws Error(Io) when it cannot be read, Error(Parse) naming the file for any other content.
std::array<uint8_t, 32> load_signing_key(const std::string& key_path);

/// The Ed25519 public key (lowercase hex, 64 chars) of a 32-byte seed. Throws Error(Signature).
std::string public_key_hex(const std::array<uint8_t, 32>& seed);

/// The public key (lowercase hex) a `verify --pubkey` argument names: 64 hex chars themselves;
/// else an existing file: a `.pub` file holds the public key's 64 hex chars (what `sign
/// --show-pubkey` prints; whitespace ignored, an optional "pubkey:" prefix allowed), any other
/// file is a signing key file whose public half is taken. Throws Error(Io) naming the argument when
/// it is neither hex nor a readable file, Error(Parse) naming the file for a malformed one.
std::string resolve_public_key(const std::string& arg);

/// Signs `model_path`: message = the raw 32-byte SHA-256 of the file, pure Ed25519. Writes
/// `<model>.sig` as pretty JSON {"alg":"ed25519-sha256","pubkey":hex32,"sha256":hex32,"sig":hex64}.
/// Returns the public key hex. Throws Error(Io|Signature).
std::string sign_file(const std::string& model_path, const std::array<uint8_t, 32>& seed);

/// Result of checking a detached signature.
struct SignatureCheck {
  bool present = false;  ///< `<model>.sig` exists
  bool valid = false;
  std::string pubkey;   ///< hex, when parsed
  std::string problem;  ///< why it is invalid
};

/// The signer's public key (lowercase hex) of `<model>.sig` when it exists and is well formed (alg
/// "ed25519-sha256", 32-byte pubkey and sha256, 64-byte sig), else nullopt. Reads only the .sig: the
/// signature is not checked (check_signature does). Never throws for a bad signature file.
std::optional<std::string> signature_pubkey(const std::string& model_path);

/// Checks `<model>.sig` when it exists (FORMAT-NOTES §1.17): alg must be "ed25519-sha256", the
/// optional `pinned_pubkey` must match, the recomputed SHA-256 must equal `sha256`
/// (case-insensitive), then Ed25519 verification. Never throws for a bad signature file.
SignatureCheck check_signature(const std::string& model_path,
                               const std::optional<std::string>& pinned_pubkey = std::nullopt);

}  // namespace cortiq::cmf
