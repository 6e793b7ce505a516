// expect: T must be trivially copyable
#include <gpucomm/sym_ptr.hpp>
#include <string>
#if GPUCOMM_MISUSE
gpucomm::sym_ptr<std::string> p;
#else
gpucomm::sym_ptr<int> p;
#endif
