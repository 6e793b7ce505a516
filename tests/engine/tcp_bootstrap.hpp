#pragma once
// A user's own bootstrap for the engine tests across network namespaces, where no mpirun spans
// both: rank 0 listens on host:port, the others connect to it; allgather is a gather to rank 0 and
// a send back to everyone, barrier an allgather of one byte. Adapted with
// gpucomm::callback_bootstrap, as a user adapts a job launcher's key-value store.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gpucomm/host/bootstrap.hpp>

namespace gpucomm_test {

class tcp_bootstrap {
 public:
  /// `host`: rank 0's IPv4 address; every rank calls with the same host and port.
  tcp_bootstrap(std::string const& host, int port, int rank, int size) : rank_(rank), size_(size) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
      throw std::runtime_error("tcp_bootstrap: bad address " + host);
    if (rank == 0) {
      int const l = socket(AF_INET, SOCK_STREAM, 0);
      int one = 1;
      setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, size) != 0)
        throw std::runtime_error("tcp_bootstrap: cannot listen on " + host + ":" + std::to_string(port) + ": " +
                                 std::strerror(errno));
      peers_.assign(static_cast<std::size_t>(size), -1);
      for (int i = 1; i < size; ++i) {
        int const s = accept(l, nullptr, nullptr);
        int r = 0;
        recv_all(s, &r, sizeof r);
        if (r <= 0 || r >= size) throw std::runtime_error("tcp_bootstrap: a peer sent rank " + std::to_string(r));
        peers_[static_cast<std::size_t>(r)] = s;
      }
      close(l);
    } else {
      auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      for (;;) {
        root_ = socket(AF_INET, SOCK_STREAM, 0);
        if (::connect(root_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
        close(root_);
        if (std::chrono::steady_clock::now() > until)
          throw std::runtime_error("tcp_bootstrap: rank 0 at " + host + ":" + std::to_string(port) + " did not accept");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      send_all(root_, &rank_, sizeof rank_);
    }
  }
  tcp_bootstrap(tcp_bootstrap const&) = delete;
  tcp_bootstrap& operator=(tcp_bootstrap const&) = delete;
  ~tcp_bootstrap() {
    for (int s : peers_)
      if (s >= 0) close(s);
    if (root_ >= 0) close(root_);
  }

  void allgather(void const* send, void* recv, std::size_t bytes) {
    auto* out = static_cast<char*>(recv);
    if (rank_ == 0) {
      std::memcpy(out, send, bytes);
      for (int r = 1; r < size_; ++r) recv_all(peers_[static_cast<std::size_t>(r)], out + r * bytes, bytes);
      for (int r = 1; r < size_; ++r) send_all(peers_[static_cast<std::size_t>(r)], out, bytes * size_);
    } else {
      send_all(root_, send, bytes);
      recv_all(root_, out, bytes * size_);
    }
  }
  void barrier() {
    std::vector<char> all(static_cast<std::size_t>(size_));
    char const one = 1;
    allgather(&one, all.data(), 1);
  }

  /// This bootstrap as gpucomm's adaptor for a user's collectives (it must outlive the result).
  gpucomm::callback_bootstrap adapt() {
    return {rank_, size_, [this](void const* s, void* r, std::size_t n) { allgather(s, r, n); }, [this] { barrier(); }};
  }

 private:
  static void send_all(int s, void const* p, std::size_t n) {
    auto const* c = static_cast<char const*>(p);
    while (n != 0) {
      ssize_t const k = ::send(s, c, n, MSG_NOSIGNAL);
      if (k <= 0) throw std::runtime_error(std::string("tcp_bootstrap: send failed: ") + std::strerror(errno));
      c += k, n -= static_cast<std::size_t>(k);
    }
  }
  static void recv_all(int s, void* p, std::size_t n) {
    auto* c = static_cast<char*>(p);
    while (n != 0) {
      ssize_t const k = ::recv(s, c, n, 0);
      if (k <= 0) throw std::runtime_error("tcp_bootstrap: a peer closed the connection");
      c += k, n -= static_cast<std::size_t>(k);
    }
  }

  int rank_, size_;
  int root_ = -1;
  std::vector<int> peers_;  // rank 0: [rank] its socket
};

}  // namespace gpucomm_test
