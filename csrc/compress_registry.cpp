// Compression kernels register here (quantize, sign packing, top-k, sparse scatter/gather).
#include "common.h"

namespace compcoll {
void register_compress(nb::module_& m) { (void)m; }
}  // namespace compcoll
