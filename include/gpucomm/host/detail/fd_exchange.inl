#pragma once
// The bodies of fd_exchange.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline fd_exchange::fd_exchange(std::uint64_t session, int rank) : session_(session), rank_(rank) {
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("socket(AF_UNIX)");
  sockaddr_un addr{};
  socklen_t const len = address(rank, addr);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int const e = errno;
    ::close(fd_);
    fd_ = -1;
    errno = e;
    fail("bind(abstract unix socket)");
  }
}

inline fd_exchange& fd_exchange::operator=(fd_exchange&& o) noexcept {
  std::swap(fd_, o.fd_);
  std::swap(session_, o.session_);
  std::swap(rank_, o.rank_);
  std::swap(pending_, o.pending_);
  return *this;
}

inline fd_exchange::~fd_exchange() {
  for (auto& [key, fd] : pending_) ::close(fd);
  if (fd_ >= 0) ::close(fd_);
}

inline void fd_exchange::send(int to_rank, int fd, std::uint64_t tag) {
  message m{rank_, tag};
  iovec iov{&m, sizeof(m)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  sockaddr_un addr{};
  socklen_t const len = address(to_rank, addr);
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  // The peer's socket exists once the world's construction barrier has passed; a full receive
  // queue (EAGAIN/ENOBUFS) is retried.
  for (int attempt = 0;; ++attempt) {
    if (::sendmsg(fd_, &msg, 0) == static_cast<ssize_t>(sizeof(m))) return;
    if ((errno == EAGAIN || errno == ENOBUFS || errno == EINTR) && attempt < 100000) {
      sleep_us(50);
      continue;
    }
    fail("sendmsg(SCM_RIGHTS) to PE " + std::to_string(to_rank));
  }
}

inline int fd_exchange::receive(int from_rank, std::uint64_t tag) {
  auto const key = std::make_pair(from_rank, tag);
  for (;;) {
    if (auto it = pending_.find(key); it != pending_.end()) {
      int const fd = it->second;
      pending_.erase(it);
      return fd;
    }
    message m{};
    iovec iov{&m, sizeof(m)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t const got = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("recvmsg(SCM_RIGHTS)");
    }
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (got != static_cast<ssize_t>(sizeof(m)) || !c || c->cmsg_type != SCM_RIGHTS) {
      throw error("fd_exchange::receive", rank_, "malformed descriptor message from a peer");
    }
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    pending_[std::make_pair(m.from, m.tag)] = fd;
  }
}

inline socklen_t fd_exchange::address(int rank, sockaddr_un& addr) const {
  addr.sun_family = AF_UNIX;
  // Abstract namespace: sun_path starts with NUL, nothing is created on disk.
  int const n = std::snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "gpucomm-%016llx-%d",
                              static_cast<unsigned long long>(session_), rank);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

inline void fd_exchange::fail(std::string const& call) const {
  throw error(call, rank_, std::strerror(errno),
              "the processes of a world on one host pass memory handles over abstract unix sockets; "
              "they must share a network namespace");
}

}  // namespace gpucomm::detail
