// True append: grows a single-file CMF in place (spec §9 claim 11 "append-only growth";
// FORMAT-NOTES §1.16 and decision 5). Old bytes never move and are never overwritten; only the
// 128-byte envelope at offset 0 is patched, last.
//
// Layout of one append to a file whose sections end at L (the end of the furthest section the
// envelope names):
//   M = align64(L)        a 64-byte intent record (AppendIntent) bound to the old envelope
//   after it              the new payloads, each at a multiple of 64 relative to data_off (4096 for
//                         payloads ≥ 16 KiB), zero gaps; data_len grows to the last one's end, so
//                         the old header, directory and anything else between the old blob and the
//                         new payloads become dead bytes inside the data section
//   then                  masks section (new bytes, or a copy of the old one when the grown data
//                         section would cover it), vocab and sparse index (copied only when
//                         covered), the header JSON, the directory — back to back, unaligned
//   EOF                   the file is truncated right after the directory
// Order of operations: intent record, payloads, sections, header, directory, ftruncate, fsync,
// one 128-byte pwrite of the envelope at offset 0 (inside the first 512-byte sector), fsync.
//
// Crash safety: until the envelope write, the file on disk is the old file plus bytes after L that
// no old section names; the old envelope still points at untouched, valid structures, so the file
// opens and verifies as the old one (Reader::verify accepts bytes after the last section when they
// start with an intent record bound to the current envelope — the stale tail of an interrupted
// append; the next append or `compact` reclaims it). After the envelope write the file is the new
// one. A single pwrite of 128 bytes cannot be split by a kill -9 (Linux copies it into the page
// cache in one step) and lies in one device sector; a torn envelope (only half of the 128 bytes
// written, which needs a torn sector) is detected, not repaired: the file no longer opens or fails
// its hash checks.
//
// Dead bytes (old headers and directories, dropped payloads, moved sections, intent records) are
// listed in the header key "cortiq_dead_bytes": [[absolute offset, length], …] (sorted, merged)
// so that Reader::verify's "unused bytes are zero" check skips exactly them; the Writer (and so
// `cortiq compact`) drops the key, and compact rewrites tightly.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cmf/format.h"
#include "cmf/header.h"
#include "cmf/writer.h"

namespace cortiq::cmf {

/// Header key listing dead byte ranges ([[off, len], …], absolute file offsets) of a grown file.
inline constexpr std::string_view kDeadBytesKey = "cortiq_dead_bytes";
/// Size of the intent record written at the start of every appended tail.
inline constexpr uint64_t kAppendIntentSize = 64;

/// The 64-byte record an append writes at align64(old end) before anything else:
/// [0:8] "CMFAPPND" [8:16] hash64(old envelope's 128 bytes) [16:24] planned new file size
/// [24:32] new header hash [32:40] new directory hash [40:56] zero [56:64] hash64(bytes 0..56).
struct AppendIntent {
  uint64_t old_envelope_hash = 0;
  uint64_t new_file_size = 0;
  uint64_t new_header_hash = 0;
  uint64_t new_dir_hash = 0;
  std::array<uint8_t, kAppendIntentSize> encode() const noexcept;
  /// nullopt unless `b` holds ≥ 64 bytes starting with a well-formed record (magic and checksum).
  static std::optional<AppendIntent> decode(std::span<const uint8_t> b) noexcept;
};

/// The end of the furthest section the envelope names (≥ 128): where an append starts.
uint64_t envelope_end(const Envelope& e) noexcept;

/// True when the bytes `file[end..]` after the sections (`end` = envelope_end(env)) are the stale
/// tail of an interrupted append of this very envelope: zeros up to align64(end), then an intent
/// record whose old_envelope_hash is hash64(file[0..128]).
bool is_stale_append_tail(std::span<const uint8_t> file, uint64_t end) noexcept;

/// The dead ranges of a header ("cortiq_dead_bytes"), sorted; empty when absent. Throws
/// Error(Parse) naming the key when it is not an array of [u64 off, u64 len] pairs.
std::vector<std::pair<uint64_t, uint64_t>> dead_ranges(const Header& h);

/// Options of append_in_place.
struct AppendOptions {
  /// New masks section bytes (spec §6 layout, e.g. encode_masks(catalog, arch)); validated against
  /// the new header's arch. nullopt keeps the file's masks (an empty vector removes them). Replacing
  /// the masks drops the sparse index (decision 4: our writers do not emit one).
  std::optional<std::vector<uint8_t>> masks;
  /// Validate each added payload with quant::validate_payload (u8 is raw bytes).
  bool validate_payloads = true;
  /// A detached signature `<path>.sig` (FORMAT-NOTES §1.17) covers the file's SHA-256, which an
  /// append changes. false: refuse such a file; true: delete the .sig (before any byte is written,
  /// so an interrupted append leaves an unsigned old file) — sign the grown file again afterwards.
  bool remove_signature = false;
  /// Testing: a fault point (see kAppendFaultPoints) at which the process calls _exit(137), as if
  /// killed. Empty = the environment variable CORTIQ_FAULT_APPEND, if set.
  std::string fault_point;
};

/// Fault points, in the order an append reaches them: "intent" (intent record written),
/// "payloads" (new payloads written), "header" (sections and header JSON written), "dir"
/// (directory written, not yet truncated/synced), "synced" (tail fsynced, envelope not written),
/// "torn_envelope" (only the first 64 bytes of the new envelope written — a torn sector, which a
/// kill cannot produce), "envelope" (envelope written, not yet fsynced).
inline constexpr std::string_view kAppendFaultPoints[] = {"intent", "payloads",      "header",  "dir",
                                                          "synced", "torn_envelope", "envelope"};

/// What an append did.
struct AppendResult {
  uint64_t old_size = 0;    ///< file size before (bytes), stale tail included
  uint64_t new_size = 0;    ///< file size after (bytes)
  uint64_t dead_bytes = 0;  ///< Σ lengths of the dead ranges now listed in the header
  uint64_t dir_hash = 0;    ///< the new envelope's directory hash (a skill's base_dir_hash)
};

/// Grows the CMF file at `path` in place: removes the tensors named in `drop` from the directory
/// (their bytes become dead), adds `add` (each `shape` row-major `[out, in]`, ≤ 6 dims), and
/// replaces the header with `header` (the caller's updated copy of the file's header, e.g. with a
/// new `skills` record; its section_hashes, shard and dead-bytes key are recomputed). A name in
/// both `drop` and `add` replaces that tensor. Existing tensors keep their offsets and bytes.
/// Deterministic: the same file, header, tensors and options give the same bytes, whatever stale
/// tail an interrupted append left. Holds an exclusive flock on the file while it works.
///
/// Throws Error(InvalidArgument) when `<path>.sig` exists and opt.remove_signature is false;
/// Error(Unsupported) for a shard set member or a SKILL_FILE (bit 6) input, or a header
/// that would make the file one (a shard block, a skill record with base_dir_hash);
/// Error(Bounds) when bytes after the last section are not the stale tail of one of our appends
/// (another tool appended: compact the file first) or the envelope changed while we worked;
/// Error(InvalidArgument) for a dropped name that is absent, an added name that exists and is not
/// dropped (or repeats), an empty/non-UTF-8 name, a bad shape, masks that do not match the arch;
/// Error(Parse|Bounds) for a payload that does not match its dtype/shape; Error(HashMismatch)
/// when the file's header/directory/section hashes are already wrong (nothing damaged gets fresh
/// hashes); any Reader::open error; Error(Io). On any error before the envelope write the file
/// still opens as the old one.
AppendResult append_in_place(const std::string& path, const Header& header, std::span<const TensorData> add,
                             std::span<const std::string> drop = {}, const AppendOptions& opt = {});

}  // namespace cortiq::cmf
