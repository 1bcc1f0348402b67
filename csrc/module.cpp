// The one compiled extension of compcoll. Each kernel family registers itself here.
#include "common.h"

namespace compcoll {
void register_reduce(nb::module_& m);
void register_compress(nb::module_& m);
}  // namespace compcoll

NB_MODULE(_compcoll, m) {
  using namespace compcoll;
  m.doc() = "compcoll C++ kernels (CPU, OpenMP)";
#ifdef COMPCOLL_HAVE_OPENMP
  m.attr("openmp") = true;
#else
  m.attr("openmp") = false;
#endif
  m.def("num_threads", &num_threads, "Threads each kernel may use.");
  m.def("set_num_threads", &set_num_threads, nb::arg("n"), "Set the threads each kernel may use.");
  register_reduce(m);
  register_compress(m);
}
