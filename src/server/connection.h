// Client-disconnect detection for `cortiq serve` (issue 7 §2: "a client that disconnects cancels
// its sequence at the next step").
//
// cpp-httplib 0.11 (Debian bookworm) hands a route handler neither the socket nor an
// `is_connection_closed` callback (that arrived in later releases), and a streaming DataSink's
// `is_writable` only reports send-buffer room, which a closed peer still has. What a Request does
// carry is its connection's four-tuple (local_addr/local_port, remote_addr/remote_port, the numeric
// host strings getnameinfo(NI_NUMERICHOST) writes). The accepted socket is found by that tuple among
// the process's open descriptors; it stays open, owned by the handler's worker thread, until the
// handler and its content provider have returned, so polling it from that thread is safe.
//
// Policy (the same as later cpp-httplib's Request::is_connection_closed): a peer that has shut down
// its sending side (FIN: a read would return 0), reset the connection or errored is gone. Unread
// bytes (a pipelined next request) keep the connection alive.
#pragma once

#include <string_view>

namespace cortiq::server {

/// Descriptor of this process's connected TCP socket whose local end is `local_addr:local_port` and
/// whose peer is `remote_addr:remote_port` (hosts as getnameinfo NI_NUMERICHOST writes them, e.g.
/// "127.0.0.1", "::1"); -1 when there is none (e.g. /proc is not mounted). Scans /proc/self/fd.
/// Never throws.
int find_connection_fd(std::string_view local_addr, int local_port, std::string_view remote_addr,
                       int remote_port) noexcept;

/// Whether the peer of connected socket `fd` is gone: hang-up or error on the socket, or an orderly
/// shutdown already received (a read would return 0). Never blocks and never consumes bytes (peeks).
/// False for fd < 0 and when the answer is not known yet (EINTR).
bool peer_gone(int fd) noexcept;

}  // namespace cortiq::server
