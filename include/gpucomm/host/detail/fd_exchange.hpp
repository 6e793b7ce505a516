#pragma once
// Passing POSIX file descriptors (exported CUDA memory handles) between the processes of one host.
//
// Each process binds a datagram socket in Linux's abstract namespace, named after the world's
// session id and its rank, and sends descriptors with SCM_RIGHTS. Every message carries the sender
// and a tag (the allocation's sequence number); messages that arrive before they are asked for are
// kept, so peers may send in any order.

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "../../error.hpp"
#include "os_thread.hpp"

namespace gpucomm::detail {

class fd_exchange {
 public:
  fd_exchange() = default;
  fd_exchange(std::uint64_t session, int rank);
  fd_exchange(fd_exchange&& o) noexcept { *this = std::move(o); }
  fd_exchange& operator=(fd_exchange&& o) noexcept;
  ~fd_exchange();

  /// Send a duplicate of `fd` to `to_rank` with `tag`. The caller keeps its own `fd`.
  void send(int to_rank, int fd, std::uint64_t tag);

  /// The descriptor `from_rank` sent with `tag`; blocks until it arrives. The caller owns it.
  int receive(int from_rank, std::uint64_t tag);

 private:
  struct message {
    int from;
    std::uint64_t tag;
  };

  socklen_t address(int rank, sockaddr_un& addr) const;

  [[noreturn]] void fail(std::string const& call) const;

  int fd_ = -1;
  std::uint64_t session_ = 0;
  int rank_ = 0;
  std::map<std::pair<int, std::uint64_t>, int> pending_;
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "fd_exchange.inl"
#endif
