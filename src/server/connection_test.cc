// Client-disconnect detection (server/connection.h) over real loopback TCP connections.
#include "server/connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace cortiq::server {
namespace {

/// A listening socket on 127.0.0.1 (any port), a client connected to it and the accepted end.
struct Loopback {
  int listener = -1, client = -1, server = -1;
  int port = 0, client_port = 0;

  Loopback() {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 4) != 0)
      return;
    socklen_t len = sizeof a;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    sockaddr_in c{};
    len = sizeof c;
    ::getsockname(client, reinterpret_cast<sockaddr*>(&c), &len);
    client_port = ntohs(c.sin_port);
    server = ::accept(listener, nullptr, nullptr);
  }
  ~Loopback() {
    for (int fd : {listener, client, server})
      if (fd >= 0) ::close(fd);
  }
  bool ok() const { return server >= 0 && client_port > 0; }
  void close_client() {
    ::close(client);
    client = -1;
  }
  /// Blocks until the accepted end has something to report (data, FIN, reset) or 10 s pass.
  void wait_server_event() const {
    pollfd p{server, static_cast<short>(POLLIN | POLLRDHUP), 0};
    ::poll(&p, 1, 10000);
  }
};

TEST(Connection, FindsTheAcceptedSocketByItsFourTuple) {
  Loopback lb;
  ASSERT_TRUE(lb.ok());
  EXPECT_EQ(find_connection_fd("127.0.0.1", lb.port, "127.0.0.1", lb.client_port), lb.server);
  // The client's own socket has the mirrored tuple.
  EXPECT_EQ(find_connection_fd("127.0.0.1", lb.client_port, "127.0.0.1", lb.port), lb.client);
  // Any field off: no match (the listening socket has no peer).
  EXPECT_EQ(find_connection_fd("127.0.0.1", lb.port, "127.0.0.1", lb.port), -1);
  EXPECT_EQ(find_connection_fd("127.0.0.2", lb.port, "127.0.0.1", lb.client_port), -1);
  EXPECT_EQ(find_connection_fd("127.0.0.1", lb.port, "::1", lb.client_port), -1);
  EXPECT_EQ(find_connection_fd("127.0.0.1", lb.port, "127.0.0.1", -1), -1);
}

TEST(Connection, LiveClientWithOrWithoutPendingBytesIsNotGone) {
  Loopback lb;
  ASSERT_TRUE(lb.ok());
  EXPECT_FALSE(peer_gone(lb.server));
  // A pipelined request waiting to be read keeps the connection alive and is not consumed.
  const char req[] = "GET /health HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(lb.client, req, sizeof req - 1, 0), static_cast<ssize_t>(sizeof req - 1));
  lb.wait_server_event();
  EXPECT_FALSE(peer_gone(lb.server));
  EXPECT_FALSE(peer_gone(lb.server));
  char buf[64] = {};
  EXPECT_EQ(::recv(lb.server, buf, sizeof buf, MSG_DONTWAIT), static_cast<ssize_t>(sizeof req - 1));
  EXPECT_EQ(std::string(buf), req);
  EXPECT_FALSE(peer_gone(-1));
}

TEST(Connection, ClosedClientIsGone) {
  Loopback lb;
  ASSERT_TRUE(lb.ok());
  lb.close_client();
  lb.wait_server_event();
  EXPECT_TRUE(peer_gone(lb.server));
}

TEST(Connection, RequestThenCloseInOneSegmentIsGone) {
  // What a client does when it sends a request and hangs up: data and FIN arrive together. The
  // unread request does not mask the FIN once it has been read.
  Loopback lb;
  ASSERT_TRUE(lb.ok());
  int on = 1;
  ::setsockopt(lb.client, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
  const char req[] = "POST /v1/completions HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(lb.client, req, sizeof req - 1, 0), static_cast<ssize_t>(sizeof req - 1));
  lb.close_client();
  lb.wait_server_event();
  EXPECT_FALSE(peer_gone(lb.server));  // the request itself is still unread
  char buf[64];
  EXPECT_EQ(::recv(lb.server, buf, sizeof buf, 0), static_cast<ssize_t>(sizeof req - 1));
  EXPECT_TRUE(peer_gone(lb.server));
}

TEST(Connection, ResetClientIsGone) {
  Loopback lb;
  ASSERT_TRUE(lb.ok());
  linger l{1, 0};  // close() sends RST
  ::setsockopt(lb.client, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  lb.close_client();
  lb.wait_server_event();
  EXPECT_TRUE(peer_gone(lb.server));
}

}  // namespace
}  // namespace cortiq::server
