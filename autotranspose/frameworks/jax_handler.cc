// The XLA FFI handler behind autotranspose's JAX primitive (frameworks/jax_ops.py).
//
// A jitted call runs on buffers XLA allocated and on the stream XLA gives the handler. The
// lowering rule made the call's launches ready beforehand (permuter.device_program: the very
// kernels an eager call would run, in each device's primary context, the context XLA uses)
// and passed their addresses as attributes; here they are launched on XLA's stream through
// the compiled launcher's at_transpose / at_run (autotranspose/_native.py's SOURCE, compiled
// into this library beside this file). Those carry the driver's entry points as function
// pointers, so nothing here needs the CUDA headers or links against libcuda.
//
// Attributes (one entry per device the lowering made the call ready on):
//   programs: u64[]  addresses of the launcher structs (at_launch or at_program)
//   launches: s32[]  1: the entry is one at_launch (at_transpose), 0: an at_program (at_run)
//   devices:  s32[]  the CUDA ordinal each entry was made for (for error messages)
//   nbytes:   u64    bytes of the input and of the output the entries were made for
//
// cast_transpose's target (frameworks/jax_cast.py) takes any number of operands and results:
// its entries are programs whose addresses are codes for them (at_run_relocated: buffer k is
// the k-th operand, then the results), with the same programs, launches and devices, and
//   sizes:    u64[]  bytes of each operand, then of each result, the program was made for
//   align:    u64[]  the alignment in bytes each of their addresses must have

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

extern "C" {
// From the launcher (_native.SOURCE); the structs are opaque here.
int at_transpose(const void *launch, uint64_t src, uint64_t dst, void *stream, void *restore);
int at_run(const void *program, uint64_t src, uint64_t dst, void *stream, void *restore);
int at_run_relocated(const void *program, const uint64_t *bases, uint64_t nbases, void *stream,
                     void *restore);
void *at_launch_context(const void *launch);
void *at_program_context(const void *program);
}

namespace {

using stream_context_t = int (*)(void *stream, void **ctx);  // cuStreamGetCtx
using error_name_t = int (*)(int err, const char **name);    // cuGetErrorName

std::atomic<stream_context_t> g_stream_context{nullptr};
std::atomic<error_name_t> g_error_name{nullptr};

void *const kRestoreCallers = reinterpret_cast<void *>(1);  // the launcher's "put back"

std::string CudaError(int err) {
  const char *name = nullptr;
  error_name_t f = g_error_name.load(std::memory_order_acquire);
  std::string code = std::to_string(err);
  if (f != nullptr && f(err, &name) == 0 && name != nullptr) {
    return std::string(name) + " (" + code + ")";
  }
  return "CUresult " + code;
}

std::string Devices(ffi::Span<const int32_t> devices) {
  std::string out = "[";
  for (size_t i = 0; i < devices.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(devices[i]);
  }
  return out + "]";
}

const char kName[] = "autotranspose_permute";

// The entry made ready in the context of XLA's stream. Without a stream (the host variant),
// or where the driver cannot say which context the stream is in, a single entry is taken as
// it is: launching it on a stream of another context fails in the driver, and that error is
// reported.
ffi::Error Pick(const char *name, void *stream, ffi::Span<const uint64_t> programs,
                ffi::Span<const int32_t> launches, ffi::Span<const int32_t> devices,
                size_t *picked) {
  stream_context_t get = g_stream_context.load(std::memory_order_acquire);
  void *ctx = nullptr;
  if (stream == nullptr || get == nullptr || get(stream, &ctx) != 0 || ctx == nullptr) {
    *picked = 0;
    if (programs.size() == 1) return ffi::Error::Success();
    return ffi::Error::Internal(std::string(name) +
                                ": cannot tell which device XLA's stream belongs to, and the "
                                "call was made ready on several (CUDA devices " +
                                Devices(devices) + ")");
  }
  for (size_t i = 0; i < programs.size(); ++i) {
    const void *p = reinterpret_cast<const void *>(static_cast<uintptr_t>(programs[i]));
    void *own = launches[i] ? at_launch_context(p) : at_program_context(p);
    if (own == ctx) {
      *picked = i;
      return ffi::Error::Success();
    }
  }
  return ffi::Error::Internal(
      std::string(name) + ": XLA runs this call on a device it was not made ready for (made "
      "for CUDA devices " + Devices(devices) + ", in their primary contexts; XLA's stream is "
      "in another context). Lower the function again for this device (jax.jit traces per "
      "device assignment), or report this with the device list");
}

ffi::Error Permute(void *stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                   ffi::Span<const uint64_t> programs, ffi::Span<const int32_t> launches,
                   ffi::Span<const int32_t> devices, uint64_t nbytes) {
  if (programs.size() == 0 || launches.size() != programs.size() ||
      devices.size() != programs.size()) {
    return ffi::Error::InvalidArgument(
        std::string(kName) + ": malformed attributes (programs, launches and devices must be "
        "equally long and not empty); this call was not lowered by autotranspose's jax_ops");
  }
  if (x.size_bytes() != nbytes || y->size_bytes() != nbytes) {
    return ffi::Error::InvalidArgument(
        std::string(kName) + ": XLA passed an input of " + std::to_string(x.size_bytes()) +
        " bytes and an output of " + std::to_string(y->size_bytes()) + " bytes; the kernels "
        "were made for " + std::to_string(nbytes) + " bytes each. The element type may be "
        "stored packed or padded by XLA: convert the array to a plain numeric dtype first");
  }
  const uint64_t src = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(x.untyped_data()));
  const uint64_t dst = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(y->untyped_data()));
  if ((src | dst) & 15) {
    return ffi::Error::InvalidArgument(
        std::string(kName) + ": XLA passed " + ((src & 15) ? "an input" : "an output") +
        " buffer that is not 16-byte aligned; the kernels were chosen for 16-byte aligned "
        "buffers (XLA's allocations are): report this with the jitted function");
  }
  if (nbytes == 0) return ffi::Error::Success();
  size_t i = 0;
  ffi::Error picked = Pick(kName, stream, programs, launches, devices, &i);
  if (picked.failure()) return picked;
  const void *p = reinterpret_cast<const void *>(static_cast<uintptr_t>(programs[i]));
  int err = launches[i] ? at_transpose(p, src, dst, stream, kRestoreCallers)
                        : at_run(p, src, dst, stream, kRestoreCallers);
  if (err != 0) {
    return ffi::Error::Internal(std::string(kName) + ": launching on CUDA device " +
                                std::to_string(devices[i]) + " failed: " + CudaError(err));
  }
  return ffi::Error::Success();
}

ffi::Error PermuteOnStream(void *stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                           ffi::Span<const uint64_t> programs, ffi::Span<const int32_t> launches,
                           ffi::Span<const int32_t> devices, uint64_t nbytes) {
  return Permute(stream, x, y, programs, launches, devices, nbytes);
}

// The same handler with no stream, for XLA's CPU backend: the tests run the attribute
// decoding, the checks and the launcher call on host buffers, with entries whose driver
// entry points are host functions.
ffi::Error PermuteOnHost(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                         ffi::Span<const uint64_t> programs, ffi::Span<const int32_t> launches,
                         ffi::Span<const int32_t> devices, uint64_t nbytes) {
  return Permute(nullptr, x, y, programs, launches, devices, nbytes);
}

const char kCastName[] = "autotranspose_cast_transpose";

// A program whose addresses are codes for the call's buffers: the operands, then the results
// (cast_transpose: x, the scale and the amax given; the casts and the new amax).
ffi::Error Relocated(void *stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                     ffi::Span<const uint64_t> programs, ffi::Span<const int32_t> launches,
                     ffi::Span<const int32_t> devices, ffi::Span<const uint64_t> sizes,
                     ffi::Span<const uint64_t> align) {
  constexpr size_t kMaxBuffers = 16;
  const size_t n = args.size() + rets.size();
  if (programs.size() == 0 || launches.size() != programs.size() ||
      devices.size() != programs.size() || sizes.size() != n || align.size() != n ||
      n > kMaxBuffers) {
    return ffi::Error::InvalidArgument(
        std::string(kCastName) + ": malformed attributes (programs, launches and devices must "
        "be equally long and not empty, sizes and align one per operand and result); this call "
        "was not lowered by autotranspose's jax_cast");
  }
  uint64_t bases[kMaxBuffers];
  // Buffer k's address, after checking its size and alignment against what was made ready.
  auto take = [&](size_t k, const std::string &what, void *data, size_t bytes) -> ffi::Error {
    bases[k] = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data));
    if (bytes != sizes[k]) {
      return ffi::Error::InvalidArgument(
          std::string(kCastName) + ": XLA passed " + what + " of " + std::to_string(bytes) +
          " bytes; the kernels were made for " + std::to_string(sizes[k]) + " bytes. The "
          "element type may be stored packed or padded by XLA: convert the array to a plain "
          "numeric dtype first");
    }
    if (align[k] > 1 && bases[k] % align[k] != 0) {
      return ffi::Error::InvalidArgument(
          std::string(kCastName) + ": XLA passed " + what + " at an address that is not " +
          std::to_string(align[k]) + "-byte aligned; the kernels were chosen for aligned "
          "buffers (XLA's allocations are): report this with the jitted function");
    }
    return ffi::Error::Success();
  };
  for (size_t k = 0; k < args.size(); ++k) {
    ffi::ErrorOr<ffi::AnyBuffer> arg = args.get<ffi::AnyBuffer>(k);
    if (arg.has_error()) return arg.error();
    ffi::Error e = take(k, "operand " + std::to_string(k), arg->untyped_data(), arg->size_bytes());
    if (e.failure()) return e;
  }
  for (size_t k = 0; k < rets.size(); ++k) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> ret = rets.get<ffi::AnyBuffer>(k);
    if (ret.has_error()) return ret.error();
    ffi::Error e = take(args.size() + k, "result " + std::to_string(k), (*ret)->untyped_data(),
                        (*ret)->size_bytes());
    if (e.failure()) return e;
  }
  size_t i = 0;
  ffi::Error picked = Pick(kCastName, stream, programs, launches, devices, &i);
  if (picked.failure()) return picked;
  const void *p = reinterpret_cast<const void *>(static_cast<uintptr_t>(programs[i]));
  int err = at_run_relocated(p, bases, n, stream, kRestoreCallers);
  if (err != 0) {
    return ffi::Error::Internal(std::string(kCastName) + ": launching on CUDA device " +
                                std::to_string(devices[i]) + " failed: " + CudaError(err));
  }
  return ffi::Error::Success();
}

ffi::Error RelocatedOnStream(void *stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                             ffi::Span<const uint64_t> programs, ffi::Span<const int32_t> launches,
                             ffi::Span<const int32_t> devices, ffi::Span<const uint64_t> sizes,
                             ffi::Span<const uint64_t> align) {
  return Relocated(stream, args, rets, programs, launches, devices, sizes, align);
}

// The same without a stream, for XLA's CPU backend (tests, as PermuteOnHost).
ffi::Error RelocatedOnHost(ffi::RemainingArgs args, ffi::RemainingRets rets,
                           ffi::Span<const uint64_t> programs, ffi::Span<const int32_t> launches,
                           ffi::Span<const int32_t> devices, ffi::Span<const uint64_t> sizes,
                           ffi::Span<const uint64_t> align) {
  return Relocated(nullptr, args, rets, programs, launches, devices, sizes, align);
}

}  // namespace

extern "C" void at_jax_bind(void *stream_context, void *error_name) {
  g_stream_context.store(reinterpret_cast<stream_context_t>(stream_context),
                         std::memory_order_release);
  g_error_name.store(reinterpret_cast<error_name_t>(error_name), std::memory_order_release);
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(AtJaxPermute, PermuteOnStream,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void *>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const uint64_t>>("programs")
                                  .Attr<ffi::Span<const int32_t>>("launches")
                                  .Attr<ffi::Span<const int32_t>>("devices")
                                  .Attr<uint64_t>("nbytes"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(AtJaxPermuteHost, PermuteOnHost,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const uint64_t>>("programs")
                                  .Attr<ffi::Span<const int32_t>>("launches")
                                  .Attr<ffi::Span<const int32_t>>("devices")
                                  .Attr<uint64_t>("nbytes"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(AtJaxRelocated, RelocatedOnStream,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void *>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<ffi::Span<const uint64_t>>("programs")
                                  .Attr<ffi::Span<const int32_t>>("launches")
                                  .Attr<ffi::Span<const int32_t>>("devices")
                                  .Attr<ffi::Span<const uint64_t>>("sizes")
                                  .Attr<ffi::Span<const uint64_t>>("align"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(AtJaxRelocatedHost, RelocatedOnHost,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<ffi::Span<const uint64_t>>("programs")
                                  .Attr<ffi::Span<const int32_t>>("launches")
                                  .Attr<ffi::Span<const int32_t>>("devices")
                                  .Attr<ffi::Span<const uint64_t>>("sizes")
                                  .Attr<ffi::Span<const uint64_t>>("align"));
