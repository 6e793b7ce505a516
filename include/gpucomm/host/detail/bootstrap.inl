#pragma once
// The bodies of bootstrap.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline void any_bootstrap::allgather(void const* send, void* recv, std::size_t bytes) {
  if (impl_)
    impl_->allgather(send, recv, bytes);
  else
    std::memcpy(recv, send, bytes);
}

inline void any_bootstrap::barrier() {
  if (impl_) impl_->barrier();
}

inline void all_ok_or_throw(any_bootstrap& boot, bool ok, std::string const& message, char const* call,
                            char const* hint) {
  struct verdict {
    char ok;
    char text[255];
  };
  verdict mine{};
  mine.ok = ok ? 1 : 0;
  std::strncpy(mine.text, message.c_str(), sizeof(mine.text) - 1);
  auto const all = boot.allgather_value(mine);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r].ok)
      throw error(call, static_cast<int>(r), std::string(all[r].text, strnlen(all[r].text, sizeof(all[r].text))), hint);
  }
}

}  // namespace gpucomm::detail
