// CRC-32C (Castagnoli) of payload bytes, the wire format's checksum: SSE4.2's crc32
// instruction where the CPU has it (checked at run time, so a build without -march=native
// uses it too), a table otherwise. Both give the same value, on every machine.
#include <array>
#include <cstring>
#include <vector>

#include "compress_common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define COMPCOLL_CRC32C_HW 1
#endif

namespace compcoll {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // CRC-32C, reflected

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
    t[i] = c;
  }
  return t;
}

uint32_t crc32c_table(uint32_t c, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return c;
}

#ifdef COMPCOLL_CRC32C_HW
#define COMPCOLL_SSE42 __attribute__((target("sse4.2")))

COMPCOLL_SSE42 uint32_t crc32c_hw(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);  // any alignment: the bytes may sit anywhere in a message
    c64 = _mm_crc32_u64(c64, w);
  }
  uint32_t c32 = uint32_t(c64);
  for (; i < n; ++i) c32 = _mm_crc32_u8(c32, p[i]);
  return c32;
}

// The crc32 instruction has a latency of three cycles and a throughput of one: three
// independent streams over three lanes of a block keep it busy, and the lanes' CRCs are joined
// by the linearity of CRCs: crc(s, A B) = shift(crc(s, A), |B|) ^ crc(0, B), where shift(x, n)
// runs the state x over n zero bytes, a linear map kept as its 32 columns.
constexpr size_t kLane = 4096;

struct Shift {
  uint32_t col[32];
  uint32_t operator()(uint32_t x) const {
    uint32_t r = 0;
    for (int i = 0; i < 32; ++i) r ^= col[i] & (0u - ((x >> i) & 1u));
    return r;
  }
};

Shift make_shift(size_t n) {
  const std::vector<uint8_t> zeros(n, 0);
  Shift s{};
  for (int i = 0; i < 32; ++i) s.col[i] = crc32c_hw(1u << i, zeros.data(), n);
  return s;
}

COMPCOLL_SSE42 uint32_t crc32c_hw3(uint32_t c, const uint8_t* p, size_t n) {
  static const Shift one = make_shift(kLane), two = make_shift(2 * kLane);
  for (; n >= 3 * kLane; p += 3 * kLane, n -= 3 * kLane) {
    uint64_t a = c, b = 0, d = 0;
    for (size_t i = 0; i < kLane; i += 8) {
      uint64_t wa, wb, wd;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, p + kLane + i, 8);
      std::memcpy(&wd, p + 2 * kLane + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      d = _mm_crc32_u64(d, wd);
    }
    c = two(uint32_t(a)) ^ one(uint32_t(b)) ^ uint32_t(d);
  }
  return crc32c_hw(c, p, n);
}
#endif

uint32_t crc32c(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
#ifdef COMPCOLL_CRC32C_HW
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw) return ~crc32c_hw3(c, p, n);
#endif
  return ~crc32c_table(c, p, n);
}

}  // namespace

void register_checksum(nb::module_& m) {
  m.def(
      "crc32c",
      [](HostInput data, uint32_t crc) {
        const auto* p = static_cast<const uint8_t*>(data.data());
        const size_t n = data.nbytes();
        nb::gil_scoped_release nogil;
        return crc32c(crc, n ? p : nullptr, n);
      },
      nb::arg("data"), nb::arg("crc") = 0,
      "CRC-32C of the array's bytes, continuing from crc (the value for earlier bytes).");
  m.def("crc32c_hardware", []() {
#ifdef COMPCOLL_CRC32C_HW
    return bool(__builtin_cpu_supports("sse4.2"));
#else
    return false;
#endif
  }, "Whether crc32c runs on the CPU's crc32 instruction.");
}

}  // namespace compcoll
