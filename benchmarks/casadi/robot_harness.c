// Tight-loop timing harness of a CasADi-generated function (benchmarks/bench_robots.py --casadi): FN is its
// name, fn.h its header; prints "ns <per call>" per repetition.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "fn.h"
#ifndef FN
#define FN cas_aba
#endif
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
  long calls = argc > 1 ? atol(argv[1]) : 2000; int reps = argc > 2 ? atoi(argv[2]) : 5;
  casadi_int sz_arg, sz_res, sz_iw, sz_w;
  XCAT(FN, _work)(&sz_arg, &sz_res, &sz_iw, &sz_w);
  const casadi_real** arg = malloc(sizeof(void*) * sz_arg); casadi_real** res = malloc(sizeof(void*) * sz_res);
  casadi_int* iw = malloc(sizeof(casadi_int) * (sz_iw + 1)); casadi_real* w = malloc(sizeof(casadi_real) * (sz_w + 1));
  const casadi_int* sp_in = XCAT(FN, _sparsity_in)(0); const casadi_int* sp_out = XCAT(FN, _sparsity_out)(0);
  casadi_int nin = sp_in[0] * sp_in[1], nout = sp_out[2 + sp_out[1]];
  casadi_real* x = malloc(sizeof(double) * nin); casadi_real* y = malloc(sizeof(double) * (nout + 1));
  srand(1); for (casadi_int i = 0; i < nin; ++i) x[i] = (rand() / (double)RAND_MAX) - 0.5;
  arg[0] = x; res[0] = y; double check = 0;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    for (long i = 0; i < calls; ++i) { XCAT(FN, )(arg, res, iw, w, 0); x[0] += 1e-12 * y[0]; }
    printf("ns %.3f\n", (now() - t0) / calls * 1e9); check += y[0];
  }
  printf("check %g\n", check);
  return 0;
}
