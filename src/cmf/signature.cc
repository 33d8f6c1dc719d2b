// Ed25519 over SHA-256 via OpenSSL EVP (FORMAT-NOTES §1.17).
#include "cmf/signature.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace cortiq::cmf {

namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

std::optional<std::vector<uint8_t>> from_hex(std::string_view s) {
  if (s.size() % 2) return std::nullopt;
  std::vector<uint8_t> out;
  for (size_t i = 0; i < s.size(); i += 2) {
    auto d = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    int hi = d(s[i]), lo = d(s[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<uint8_t>(hi * 16 + lo));
  }
  return out;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string to_hex(std::span<const uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (uint8_t x : b) s += d[x >> 4], s += d[x & 15];
  return s;
}

std::array<uint8_t, 32> sha256_file(const std::string& path) {
  MappedFile f(path);
  std::array<uint8_t, 32> out{};
  unsigned len = 0;
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    fail(ErrorKind::Io, "sha256: OpenSSL init failed");
  constexpr size_t kChunk = size_t{64} << 20;
  for (size_t off = 0; off < f.size(); off += kChunk)
    EVP_DigestUpdate(ctx.get(), f.data() + off, std::min(kChunk, f.size() - off));
  EVP_DigestFinal_ex(ctx.get(), out.data(), &len);
  return out;
}

namespace {

/// The file's text without whitespace.
std::string read_compact(const std::string& path) {
  std::string txt = read_file(path);
  txt.erase(std::remove_if(txt.begin(), txt.end(), [](unsigned char c) { return std::isspace(c); }),
            txt.end());
  return txt;
}

bool is_hex64(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos;
}

}  // namespace

std::array<uint8_t, 32> load_signing_key(const std::string& key_path) {
  auto b = from_hex(read_compact(key_path));
  if (!b || b->size() != 32)
    fail(ErrorKind::Parse, "{}: signing key must be 64 hex characters (32-byte Ed25519 seed)", key_path);
  std::array<uint8_t, 32> seed{};
  std::copy(b->begin(), b->end(), seed.begin());
  return seed;
}

std::string public_key_hex(const std::array<uint8_t, 32>& seed) {
  Pkey key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size()));
  std::array<uint8_t, 32> pub{};
  size_t publen = pub.size();
  if (!key || EVP_PKEY_get_raw_public_key(key.get(), pub.data(), &publen) != 1 || publen != pub.size())
    fail(ErrorKind::Signature, "cannot derive the Ed25519 public key");
  return to_hex(pub);
}

std::string resolve_public_key(const std::string& arg) {
  if (is_hex64(arg)) return lower(arg);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(arg, ec))
    fail(ErrorKind::Io, "'{}' is neither 64 hex characters (an Ed25519 public key) nor a key or .pub file",
         arg);
  if (std::filesystem::path(arg).extension() != ".pub") return public_key_hex(load_signing_key(arg));
  std::string txt = read_compact(arg);
  if (txt.rfind("pubkey:", 0) == 0) txt.erase(0, 7);
  if (!is_hex64(txt))
    fail(ErrorKind::Parse, "{}: a .pub file must hold 64 hex characters (an Ed25519 public key)", arg);
  return lower(txt);
}

std::array<uint8_t, 32> load_or_create_signing_key(const std::string& key_path) {
  if (std::filesystem::exists(key_path)) return load_signing_key(key_path);
  std::array<uint8_t, 32> seed{};
  if (RAND_bytes(seed.data(), 32) != 1) fail(ErrorKind::Io, "RAND_bytes failed creating {}", key_path);
  const std::string hex = to_hex(seed) + "\n";
  write_file_atomic(key_path, std::span(reinterpret_cast<const uint8_t*>(hex.data()), hex.size()));
  ::chmod(key_path.c_str(), 0600);
  return seed;
}

std::string sign_file(const std::string& model_path, const std::array<uint8_t, 32>& seed) {
  const auto digest = sha256_file(model_path);
  Pkey key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size()));
  if (!key) fail(ErrorKind::Signature, "cannot load the Ed25519 key");
  std::array<uint8_t, 32> pub{};
  size_t publen = pub.size();
  EVP_PKEY_get_raw_public_key(key.get(), pub.data(), &publen);
  MdCtx ctx(EVP_MD_CTX_new());
  std::array<uint8_t, 64> sig{};
  size_t siglen = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig.data(), &siglen, digest.data(), digest.size()) != 1 || siglen != 64)
    fail(ErrorKind::Signature, "Ed25519 signing failed");
  nlohmann::ordered_json j;
  j["alg"] = "ed25519-sha256";
  j["pubkey"] = to_hex(pub);
  j["sha256"] = to_hex(digest);
  j["sig"] = to_hex(sig);
  const std::string txt = j.dump(2) + "\n";
  write_file_atomic(model_path + ".sig", std::span(reinterpret_cast<const uint8_t*>(txt.data()), txt.size()));
  return to_hex(pub);
}

namespace {

/// The fields of `<model>.sig`, decoded.
struct SigFields {
  std::vector<uint8_t> pub, sha, sig;
};

/// Reads and parses `<model>.sig` into `c` (present, pubkey, or the problem) and `f`; true when it
/// is well formed (alg "ed25519-sha256", 32-byte pubkey and sha256, 64-byte sig). Reads only the .sig.
bool parse_signature_file(const std::string& model_path, SignatureCheck& c, SigFields& f) {
  const std::string sig_path = model_path + ".sig";
  if (!std::filesystem::exists(sig_path)) return false;
  c.present = true;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(sig_path));
  } catch (const std::exception& e) {
    c.problem = fmt::format("{}: not valid JSON", sig_path);
    return false;
  }
  auto field = [&](const char* k) -> std::string {
    return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  if (field("alg") != "ed25519-sha256") {
    c.problem = fmt::format("{}: unsupported alg '{}'", sig_path, field("alg"));
    return false;
  }
  auto pub = from_hex(field("pubkey"));
  auto sha = from_hex(field("sha256"));
  auto sig = from_hex(field("sig"));
  if (!pub || pub->size() != 32 || !sha || sha->size() != 32 || !sig || sig->size() != 64) {
    c.problem = fmt::format("{}: malformed pubkey/sha256/sig", sig_path);
    return false;
  }
  c.pubkey = lower(field("pubkey"));
  f = {std::move(*pub), std::move(*sha), std::move(*sig)};
  return true;
}

}  // namespace

std::optional<std::string> signature_pubkey(const std::string& model_path) {
  SignatureCheck c;
  SigFields f;
  if (!parse_signature_file(model_path, c, f)) return std::nullopt;
  return c.pubkey;
}

SignatureCheck check_signature(const std::string& model_path, const std::optional<std::string>& pinned) {
  SignatureCheck c;
  SigFields f;
  if (!parse_signature_file(model_path, c, f)) return c;
  if (pinned && lower(*pinned) != c.pubkey) {
    c.problem = fmt::format("signer {} is not the pinned key {}", c.pubkey, *pinned);
    return c;
  }
  const auto digest = sha256_file(model_path);
  if (!std::equal(digest.begin(), digest.end(), f.sha.begin())) {
    c.problem = fmt::format("file SHA-256 {} differs from the signed {}", to_hex(digest), to_hex(f.sha));
    return c;
  }
  Pkey key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, f.pub.data(), f.pub.size()));
  MdCtx ctx(EVP_MD_CTX_new());
  if (!key || !ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), f.sig.data(), f.sig.size(), digest.data(), digest.size()) != 1) {
    c.problem = "Ed25519 signature does not verify";
    return c;
  }
  c.valid = true;
  return c;
}

}  // namespace cortiq::cmf
