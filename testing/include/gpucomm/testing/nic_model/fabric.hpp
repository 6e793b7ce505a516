#pragma once
// The wire between software NICs (model::nic) of different processes on one host.
//
// A nic that calls listen(address) serves a Linux abstract-namespace unix socket (SOCK_STREAM,
// sun_path[0] = '\0', no file in the file system, gone when the socket closes). A requester nic
// holds one connection per responder address, shared by its QPs, and uses it strictly
// request/reply: it sends one `request` (plus the payload of a write), then reads one `reply`
// (plus the read payload or the atomic's old value) before it sends anything else. Both ends are
// on one host, so every field is in host byte order.
//
// The server accepts on one thread and serves each connection on a thread of its own; the
// handler it calls is the responder nic's respond(), which takes none of the locks a requester
// holds while it waits for a reply, so two nics whose progress threads wait on each other's
// servers cannot deadlock. A requester that finds the connection refused, broken, timed out or
// garbled reports it as `false` from link::call(); the nic turns that into
// TRANSPORT_RETRY_EXC_ERR, as hardware does when its retries to a dead peer run out.

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <gpucomm/verbs_gpu/prm.cuh>

namespace gpucomm::verbs_gpu::model::fabric {

/// Largest write or read one request carries: mlx5's max_msg_sz (2 GiB). Bigger WQEs fail at the
/// requester with LOCAL_LENGTH_ERR, as on hardware.
inline constexpr std::uint64_t max_message = 1ull << 31;

inline constexpr std::uint32_t request_magic = 0x7166'6367u;  // "gcfq" in memory
inline constexpr std::uint32_t reply_magic = 0x7266'6367u;    // "gcfr"

/// What the responder is asked to do.
enum class op : std::uint8_t { write = 1, read = 2, atomic = 3 };

/// One request. Followed on the wire by `length` payload bytes when `kind` is op::write.
struct request {
  std::uint32_t magic = request_magic;
  op kind = op::write;
  std::uint8_t atomic_cs = 0;  ///< atomics: 1 compare-and-swap (masked or not), 0 fetch-and-add
  std::uint8_t rsvd[2] = {};
  std::uint32_t qpn = 0;       ///< the responder's QP: its PD scopes the rkey
  std::uint32_t rkey = 0;      ///< host order
  std::uint64_t raddr = 0;     ///< address at the responder
  std::uint64_t length = 0;    ///< write/read: bytes; atomics: the operand size, 4 or 8
  std::uint64_t operand[4]{};  ///< atomics: swap or add, compare or field boundary, swap mask, compare mask
};
static_assert(sizeof(request) == 64 && offsetof(request, qpn) == 8 && offsetof(request, raddr) == 16 &&
                  offsetof(request, operand) == 32,
              "the request header is a fixed 64-byte wire layout");

/// One reply. Followed by `length` bytes: a read's payload or an atomic's old value (host order,
/// `request::length` bytes); none when `syndrome` is not 0.
struct reply {
  std::uint32_t magic = reply_magic;
  std::uint8_t syndrome = 0;  ///< cqe_syndrome, 0 = success
  std::uint8_t rsvd[3] = {};
  std::uint64_t length = 0;
};
static_assert(sizeof(reply) == 16 && offsetof(reply, length) == 8, "the reply header is a fixed 16-byte wire layout");

namespace detail {

inline std::string errno_text(int e) { return std::system_category().message(e); }

/// Owns a file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  unique_fd(unique_fd const&) = delete;
  unique_fd& operator=(unique_fd const&) = delete;
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    // close() fails only with EBADF (a bug) or EINTR/EIO, after which Linux has released the
    // descriptor anyway: nothing to retry, nothing to report from a destructor.
    if (fd_ >= 0) (void)::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

/// The abstract-namespace address for `name`: sun_path[0] = '\0', then the name's bytes, with no
/// terminating NUL (the length passed to bind/connect delimits it).
inline std::pair<sockaddr_un, socklen_t> abstract_address(std::string const& name) {
  sockaddr_un a{};
  if (name.empty() || name.size() > sizeof(a.sun_path) - 1) {
    throw std::invalid_argument("gpucomm::verbs_gpu::model::fabric: address '" + name + "' must be 1 to " +
                                std::to_string(sizeof(a.sun_path) - 1) + " bytes");
  }
  a.sun_family = AF_UNIX;
  a.sun_path[0] = '\0';
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  return {a, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())};
}

/// Sends all `n` bytes; false on any error (the peer gone: EPIPE, not SIGPIPE) or timeout.
inline bool send_all(int fd, void const* p, std::size_t n) noexcept {
  auto const* b = static_cast<unsigned char const*>(p);
  while (n > 0) {
    ssize_t const k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

/// Receives exactly `n` bytes; false on end of stream, error or timeout.
inline bool recv_all(int fd, void* p, std::size_t n) noexcept {
  auto* b = static_cast<unsigned char*>(p);
  while (n > 0) {
    ssize_t const k = ::recv(fd, b, n, 0);
    if (k == 0) return false;
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

inline void set_timeout(int fd, int option, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  if (::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)) != 0) {
    throw std::runtime_error("gpucomm::verbs_gpu::model::fabric: setsockopt(SO_RCVTIMEO/SO_SNDTIMEO) failed: " +
                             errno_text(errno));
  }
}

}  // namespace detail

/// A requester's connection to one responder nic. Not thread-safe: the owning nic uses it under
/// its own mutex, one request at a time.
class link {
 public:
  /// Connects to the nic listening at `address`, retrying while nobody listens there yet (the
  /// responder's process may start later) for up to `connect_timeout`. Every later send and
  /// receive gives up after `io_timeout`. Throws std::invalid_argument for a malformed address and
  /// std::runtime_error when no connection can be made.
  static std::shared_ptr<link> connect(std::string const& address, std::chrono::milliseconds connect_timeout,
                                       std::chrono::milliseconds io_timeout) {
    auto const [sa, len] = detail::abstract_address(address);
    auto const deadline = std::chrono::steady_clock::now() + connect_timeout;
    for (;;) {
      detail::unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!fd) {
        throw std::runtime_error("gpucomm::verbs_gpu::model::fabric: socket() failed: " + detail::errno_text(errno));
      }
      if (::connect(fd.get(), reinterpret_cast<sockaddr const*>(&sa), len) == 0) {
        detail::set_timeout(fd.get(), SO_RCVTIMEO, io_timeout);
        detail::set_timeout(fd.get(), SO_SNDTIMEO, io_timeout);
        auto l = std::make_shared<link>();
        l->fd_ = std::move(fd);
        return l;
      }
      int const e = errno;
      // Refused: nobody listens yet. EAGAIN: the listener's backlog is full. EINTR: try afresh.
      bool const transient = e == ECONNREFUSED || e == ENOENT || e == EAGAIN || e == EINTR;
      if (!transient || std::chrono::steady_clock::now() >= deadline) {
        throw std::runtime_error("gpucomm::verbs_gpu::model::fabric: cannot connect to the nic at '" + address + "'" +
                                 (transient ? " within " + std::to_string(connect_timeout.count()) + " ms" : "") +
                                 ": " + detail::errno_text(e));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  /// Sends `rq` (and, for a write, its `rq.length` payload bytes) and reads the reply into `rp`
  /// and `data`. Returns false, and closes the link for good, when the connection is gone, times
  /// out, or the reply is not the one this request must get (a success carries exactly
  /// `expect_data` bytes, a failure none): the stream can no longer be trusted.
  bool call(request const& rq, void const* payload, std::uint64_t expect_data, reply& rp,
            std::vector<unsigned char>& data) noexcept {
    if (!fd_) return false;
    std::uint64_t const out = rq.kind == op::write ? rq.length : 0;
    bool good = detail::send_all(fd_.get(), &rq, sizeof(rq)) &&
                (out == 0 || detail::send_all(fd_.get(), payload, out)) &&
                detail::recv_all(fd_.get(), &rp, sizeof(rp)) && rp.magic == reply_magic &&
                rp.length == (rp.syndrome == 0 ? expect_data : 0);
    if (good && rp.length > 0) {
      try {
        data.resize(rp.length);
      } catch (...) {
        good = false;
      }
      good = good && detail::recv_all(fd_.get(), data.data(), rp.length);
    }
    if (!good) close();
    return good;
  }

  bool broken() const noexcept { return !fd_; }
  /// Closes the connection; the responder's server sees the end of the stream.
  void close() noexcept { fd_.reset(); }

 private:
  detail::unique_fd fd_;
};

/// The responder side: listens at an abstract address and answers every request with `handler`.
class server {
 public:
  /// Performs one request: returns the syndrome (0 = success) and fills `data` with what the
  /// reply carries. An exception from it is answered with REMOTE_OP_ERR.
  using handler =
      std::function<std::uint8_t(request const& rq, unsigned char const* payload, std::vector<unsigned char>& data)>;

  /// Binds and listens at `address`, then starts accepting. Throws std::invalid_argument for a
  /// malformed address and std::runtime_error when the address is taken or a call fails.
  server(std::string const& address, handler h) : handler_(std::move(h)) {
    auto const [sa, len] = detail::abstract_address(address);
    // Non-blocking listener: poll() says a connection is there, but it may be gone by accept().
    listen_fd_ = detail::unique_fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listen_fd_) fail("socket()", errno);
    if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr const*>(&sa), len) != 0) {
      fail("bind('" + address + "')", errno);
    }
    if (::listen(listen_fd_.get(), SOMAXCONN) != 0) fail("listen()", errno);
    wake_fd_ = detail::unique_fd(::eventfd(0, EFD_CLOEXEC));
    if (!wake_fd_) fail("eventfd()", errno);
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  server(server const&) = delete;
  server& operator=(server const&) = delete;
  ~server() { stop(); }

  /// Stops accepting, ends every connection (a request being served finishes first; its reply
  /// may be lost, which the requester sees as a broken connection) and joins every thread.
  void stop() noexcept {
    if (!accept_thread_.joinable()) return;
    std::uint64_t const one = 1;
    if (::write(wake_fd_.get(), &one, sizeof(one)) != static_cast<ssize_t>(sizeof(one))) {
      // Cannot happen for a fresh eventfd; shutting the listener down wakes poll() as well.
      (void)::shutdown(listen_fd_.get(), SHUT_RDWR);
    }
    accept_thread_.join();
    {
      std::lock_guard lk(conns_mu_);
      // Wakes connection threads blocked in recv() (it returns 0) or send() (EPIPE). Their
      // descriptors stay open until they are joined, so a number is never reused under them.
      for (auto& c : conns_) (void)::shutdown(c->fd.get(), SHUT_RDWR);
    }
    // The accept thread is gone, so nobody adds to conns_ any more.
    for (auto& c : conns_) c->thread.join();
    conns_.clear();
    listen_fd_.reset();
    wake_fd_.reset();
  }

 private:
  struct conn {
    detail::unique_fd fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  [[noreturn]] static void fail(std::string const& what, int e) {
    throw std::runtime_error("gpucomm::verbs_gpu::model::fabric: " + what + " failed: " + detail::errno_text(e));
  }

  void accept_loop() noexcept {
    for (;;) {
      pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;  // EFAULT/EINVAL/ENOMEM: nothing sensible left to do; connecting peers are refused
      }
      if (p[1].revents != 0 || (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return;
      if ((p[0].revents & POLLIN) == 0) continue;
      detail::unique_fd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd) {
        int const e = errno;
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
          // Out of resources: the peer waits in the backlog; try again shortly instead of spinning.
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        } else if (e != EINTR && e != EAGAIN && e != EWOULDBLOCK && e != ECONNABORTED) {
          return;
        }
        continue;
      }
      std::lock_guard lk(conns_mu_);
      // Reap connections whose peers went away, so a long-lived server does not collect threads.
      for (auto it = conns_.begin(); it != conns_.end();) {
        // Acquire: pairs with the release store at the end of serve(); the thread is past every
        // use of its conn and only needs joining.
        if ((*it)->done.load(std::memory_order_acquire)) {
          (*it)->thread.join();
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
      try {
        auto c = std::make_unique<conn>();
        c->fd = std::move(fd);
        conn* const raw = c.get();
        c->thread = std::thread([this, raw] { serve(*raw); });
        conns_.push_back(std::move(c));
      } catch (...) {
        // No thread (or no memory) for it: the connection closes and its requester sees it broken.
      }
    }
  }

  void serve(conn& c) noexcept {
    std::vector<unsigned char> payload, data;
    for (;;) {
      request rq;
      if (!detail::recv_all(c.fd.get(), &rq, sizeof(rq)) || rq.magic != request_magic) break;
      std::uint64_t const in = rq.kind == op::write ? rq.length : 0;
      if (in > max_message) break;  // not a requester of this protocol: drop it
      try {
        payload.resize(in);
      } catch (...) {
        break;
      }
      if (in > 0 && !detail::recv_all(c.fd.get(), payload.data(), in)) break;
      reply rp;
      data.clear();
      try {
        rp.syndrome = handler_(rq, payload.data(), data);
      } catch (...) {
        rp.syndrome = static_cast<std::uint8_t>(cqe_syndrome::remote_op_err);
      }
      if (rp.syndrome != 0) data.clear();
      rp.length = data.size();
      if (!detail::send_all(c.fd.get(), &rp, sizeof(rp)) ||
          (!data.empty() && !detail::send_all(c.fd.get(), data.data(), data.size()))) {
        break;
      }
      // Large writes and reads leave large buffers; do not keep them for the connection's life.
      if (payload.capacity() > (std::size_t{64} << 20)) std::vector<unsigned char>().swap(payload);
      if (data.capacity() > (std::size_t{64} << 20)) std::vector<unsigned char>().swap(data);
    }
    // Release: everything this thread did happens before the reaper's acquire and join.
    c.done.store(true, std::memory_order_release);
  }

  handler handler_;
  detail::unique_fd listen_fd_, wake_fd_;
  std::thread accept_thread_;
  std::mutex conns_mu_;  ///< guards conns_ while the accept thread runs
  std::list<std::unique_ptr<conn>> conns_;
};

}  // namespace gpucomm::verbs_gpu::model::fabric
