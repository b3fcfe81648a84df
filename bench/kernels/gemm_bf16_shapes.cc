// Kernel timing, not a bench row: oneDNN's bfloat16 GEMM (dnnl_gemm_bf16bf16f32, which the engine
// calls) against its matmul primitive on plain strided layouts, on the bench models' GEMM shapes
// (llama_100m's LM head, layers and attention, and 2048^3), one thread, best of 5 runs per shape
// in one process. Run by bench/kernels/gemm_bf16_shapes.sh.
#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cmath>
#include <cstdint>
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, float, const uint16_t*,
                                                 dnnl_dim_t, const uint16_t*, dnnl_dim_t, float, float*, dnnl_dim_t);
using namespace dnnl;
static uint16_t bf(float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  omp_set_num_threads(1);
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  struct Shape { bool ta, tb; long m, n, k; };
  std::vector<Shape> shapes = {{0,1,1024,32000,768},{0,0,1024,768,32000},{1,0,32000,768,1024},{0,1,256,256,64},{0,0,256,64,256},{1,0,256,64,256},{0,1,1024,2048,768},{1,0,2048,768,1024},{0,0,2048,2048,2048},{0,1,1024,768,768},{0,1,1024,3072,768},{0,1,1024,768,3072},
                               {0,0,1024,768,768},{1,0,768,768,1024},{1,0,3072,768,1024},{0,1,512,2048,512},{1,0,512,2048,512}};
  for (auto sh : shapes) {
    long m = sh.m, n = sh.n, k = sh.k;
    std::vector<uint16_t> a(m * k), b(k * n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = bf(std::sin(i * 0.37f));
    for (size_t i = 0; i < b.size(); ++i) b[i] = bf(std::cos(i * 0.11f));
    std::vector<float> c1(m * n), c2(m * n);
    long lda = sh.ta ? m : k, ldb = sh.tb ? k : n;
    auto t_gemm = 1e9, t_mm = 1e9;
    for (int r = 0; r < 5; ++r) {
      double t0 = now();
      dnnl_gemm_bf16bf16f32(sh.ta ? 'T' : 'N', sh.tb ? 'T' : 'N', m, n, k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c1.data(), n);
      t_gemm = std::min(t_gemm, now() - t0);
    }
    memory::dims as = sh.ta ? memory::dims{1, lda} : memory::dims{lda, 1};
    memory::dims bs = sh.tb ? memory::dims{1, ldb} : memory::dims{ldb, 1};
    memory::desc amd({m, k}, memory::data_type::bf16, as), bmd({k, n}, memory::data_type::bf16, bs),
        cmd({m, n}, memory::data_type::f32, memory::dims{n, 1});
    double tc0 = now();
    matmul::primitive_desc pd(matmul::desc(amd, bmd, cmd), eng);
    matmul p(pd);
    double tcreate = now() - tc0;
    memory am(amd, eng, a.data()), bm(bmd, eng, b.data()), cm(cmd, eng, c2.data());
    for (int r = 0; r < 5; ++r) {
      double t0 = now();
      p.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      s.wait();
      t_mm = std::min(t_mm, now() - t0);
    }
    double maxd = 0;
    for (size_t i = 0; i < c1.size(); ++i) maxd = std::max(maxd, (double)std::fabs(c1[i] - c2[i]));
    double gf = 2.0 * m * n * k / 1e9;
    std::printf("%c%c %5ld %5ld %5ld  gemm %7.1f GF/s  matmul %7.1f GF/s (create %.1f ms, impl %s)  maxdiff %.3g\n",
                sh.ta ? 'T' : 'N', sh.tb ? 'T' : 'N', m, n, k, gf / t_gemm, gf / t_mm, tcreate * 1e3, pd.impl_info_str(), maxd);
  }
}
