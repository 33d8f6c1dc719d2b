#include "server/connection.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace cortiq::server {

namespace {

/// Numeric host and port of `a` (the form cpp-httplib stores in Request::remote_addr/local_addr).
bool host_port(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  if (a.ss_family == AF_INET) {
    sockaddr_in v4;
    static_assert(sizeof v4 <= sizeof a);
    std::memcpy(&v4, &a, sizeof v4);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    sockaddr_in6 v6;
    static_assert(sizeof v6 <= sizeof a);
    std::memcpy(&v6, &a, sizeof v6);
    port = ntohs(v6.sin6_port);
  } else {
    return false;
  }
  char buf[NI_MAXHOST] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) !=
      0)
    return false;
  host = buf;
  return true;
}

bool end_is(int fd, bool peer, std::string_view want_host, int want_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (rc != 0) return false;
  std::string host;
  int port = -1;
  return host_port(a, len, host, port) && port == want_port && host == want_host;
}

}  // namespace

int find_connection_fd(std::string_view local_addr, int local_port, std::string_view remote_addr,
                       int remote_port) noexcept {
  if (local_port <= 0 || remote_port <= 0) return -1;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  const int self = ::dirfd(d);
  int found = -1;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long v = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || v < 0 || v == self) continue;
    const int fd = static_cast<int>(v);
    // getsockname fails with ENOTSOCK for files and pipes; the listening socket has no peer.
    if (end_is(fd, false, local_addr, local_port) && end_is(fd, true, remote_addr, remote_port)) {
      found = fd;
      break;
    }
  }
  ::closedir(d);
  return found;
}

bool peer_gone(int fd) noexcept {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  const int r = ::poll(&p, 1, 0);
  if (r <= 0) return false;  // nothing to read (alive), or EINTR (ask again later)
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
  if (!(p.revents & (POLLIN | POLLRDHUP))) return false;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // unread bytes (a pipelined request): still a live client
  if (n == 0) return true;  // orderly shutdown received
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace cortiq::server
