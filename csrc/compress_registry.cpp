// Compression kernels register here (quantize, sign packing, top-k, sparse scatter/gather,
// the payload checksum).
#include "compress_common.h"

namespace compcoll {
void register_compress(nb::module_& m) {
  register_quantize(m);
  register_sign(m);
  register_topk(m);
  register_sparse(m);
  register_unbiased(m);
  register_checksum(m);
}
}  // namespace compcoll
