// HPIPM on one OCP QP read from a file (benchmarks/hpipm_qp.py writes it and builds and runs this driver), for a
// per-iteration comparison with anvil's Riccati interior point on the same QP at the same partial condensing.
//
// The QP (stage k < N: z_k = [x_k; u_k], anvil's RiccatiQP layout with boxes and one elastic row):
//   min sum_k 1/2 z_k'H_k z_k + g_k'z_k + 1/2 x_N'HN x_N + gN'x_N + sum_k (zl s_k + 1/2 Zl s_k^2)
//   s.t. x_0 = x0, x_{k+1} = A_k x_k + B_k u_k + c_k, lbu <= u_k <= ubu, G_k z_k + s_k >= lg_k, s_k >= 0, GN x_N >= lgN
// File: float64s in this order, row-major: per stage k < N: H (nz x nz), g (nz), A (nx x nx), B (nx x nu), c (nx),
// lbu (nu), ubu (nu), G (nz), lg, zl, Zl; then HN (nx x nx), gN (nx), GN (nx), lgN, x0 (nx).
//
// Usage: qp <file> <nx> <nu> <N> <cond_N: N = none> <repeats> <tol> [<iter_max: 100>]
// HPIPM in SPEED mode (acados's default), its tolerances tol, at most iter_max iterations; the same QP solved
// `repeats` times from a cold start.
// Prints: status, iterations, the least seconds over the repeats of the partial condensing, of the interior point
// (d_ocp_qp_ipm_solve) and of the solution's expansion, the QP's objective and u_0.
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hpipm_d_ocp_qp.h"
#include "hpipm_d_ocp_qp_dim.h"
#include "hpipm_d_ocp_qp_ipm.h"
#include "hpipm_d_ocp_qp_sol.h"
#include "hpipm_d_part_cond.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double *take(double **cursor, int n) {
  double *out = *cursor;
  *cursor += n;
  return out;
}

int main(int argc, char **argv) {
  if (argc != 8 && argc != 9) {
    fprintf(stderr, "usage: qp <file> <nx> <nu> <N> <cond_N> <repeats> <tol> [<iter_max>]\n");
    return 2;
  }
  const int nx = atoi(argv[2]), nu = atoi(argv[3]), N = atoi(argv[4]), cond_N = atoi(argv[5]);
  const int repeats = atoi(argv[6]), nz = nx + nu;
  double tol = atof(argv[7]);
  const long count = (long)N * (nz * nz + nz + nx * nx + nx * nu + nx + 2 * nu + nz + 3) + nx * nx + 3 * nx + 1;
  double *data = malloc(count * sizeof(double));
  FILE *file = fopen(argv[1], "rb");
  if (!file || fread(data, sizeof(double), count, file) != (size_t)count) {
    fprintf(stderr, "qp: cannot read %ld doubles from %s\n", count, argv[1]);
    return 2;
  }
  fclose(file);

  // per stage: the blocks, split as HPIPM takes them (Q, S = H[u][x], R; C = G[x], D = G[u])
  int *nxs = calloc(N + 1, sizeof(int)), *nus = calloc(N + 1, sizeof(int)), *nbx = calloc(N + 1, sizeof(int));
  int *nbu = calloc(N + 1, sizeof(int)), *ng = calloc(N + 1, sizeof(int)), *ns = calloc(N + 1, sizeof(int));
  double **A = calloc(N, sizeof(double *)), **B = calloc(N, sizeof(double *)), **b = calloc(N, sizeof(double *));
  double **Q = calloc(N + 1, sizeof(double *)), **S = calloc(N + 1, sizeof(double *));
  double **R = calloc(N + 1, sizeof(double *)), **q = calloc(N + 1, sizeof(double *));
  double **r = calloc(N + 1, sizeof(double *)), **C = calloc(N + 1, sizeof(double *));
  double **D = calloc(N + 1, sizeof(double *)), **lg = calloc(N + 1, sizeof(double *));
  double **ug = calloc(N + 1, sizeof(double *)), **lbu = calloc(N + 1, sizeof(double *));
  double **ubu = calloc(N + 1, sizeof(double *)), **lbx = calloc(N + 1, sizeof(double *));
  double **ubx = calloc(N + 1, sizeof(double *)), **Zl = calloc(N + 1, sizeof(double *));
  double **Zu = calloc(N + 1, sizeof(double *)), **zl = calloc(N + 1, sizeof(double *));
  double **zu = calloc(N + 1, sizeof(double *)), **ls = calloc(N + 1, sizeof(double *));
  double **us = calloc(N + 1, sizeof(double *));
  int **idxbx = calloc(N + 1, sizeof(int *)), **idxbu = calloc(N + 1, sizeof(int *));
  int **idxs_rev = calloc(N + 1, sizeof(int *));
  double *cursor = data, zero[1] = {0.0}, *x0;
  double *ug_value = calloc(1, sizeof(double));
  int *index = malloc((nx + nu) * sizeof(int));
  for (int i = 0; i < nx + nu; ++i) index[i] = i;
  for (int k = 0; k < N; ++k) {
    const double *H = take(&cursor, nz * nz), *g = take(&cursor, nz);
    nxs[k] = nx, nus[k] = nu, nbu[k] = nu, ng[k] = 1, ns[k] = 1;
    Q[k] = malloc(nx * nx * sizeof(double)), S[k] = malloc(nu * nx * sizeof(double));
    R[k] = malloc(nu * nu * sizeof(double));
    for (int i = 0; i < nx; ++i)
      for (int j = 0; j < nx; ++j) Q[k][i * nx + j] = H[i * nz + j];
    for (int i = 0; i < nu; ++i)
      for (int j = 0; j < nx; ++j) S[k][i * nx + j] = H[(nx + i) * nz + j];
    for (int i = 0; i < nu; ++i)
      for (int j = 0; j < nu; ++j) R[k][i * nu + j] = H[(nx + i) * nz + nx + j];
    q[k] = (double *)g, r[k] = (double *)g + nx;
    A[k] = take(&cursor, nx * nx), B[k] = take(&cursor, nx * nu), b[k] = take(&cursor, nx);
    lbu[k] = take(&cursor, nu), ubu[k] = take(&cursor, nu), idxbu[k] = index;
    C[k] = take(&cursor, nz), D[k] = C[k] + nx;
    lg[k] = take(&cursor, 1), ug[k] = ug_value;
    zl[k] = zu[k] = take(&cursor, 1), Zl[k] = Zu[k] = take(&cursor, 1), ls[k] = us[k] = zero;
    idxs_rev[k] = malloc((nu + nx + 1) * sizeof(int));
  }
  Q[N] = take(&cursor, nx * nx), q[N] = take(&cursor, nx), C[N] = take(&cursor, nx), lg[N] = take(&cursor, 1);
  ug[N] = ug_value, nxs[N] = nx, ng[N] = 1, x0 = take(&cursor, nx);
  nbx[0] = nx, idxbx[0] = index, lbx[0] = ubx[0] = x0;  // x_0 = x0, as acados poses it
  idxs_rev[N] = malloc(sizeof(int));
  for (int k = 0; k <= N; ++k) {
    const int bounds = nbu[k] + nbx[k];
    for (int i = 0; i <= bounds; ++i) idxs_rev[k][i] = i == bounds && k < N ? 0 : -1;  // the rows k < N are soft
  }

  struct d_ocp_qp_dim dim, dim2;
  d_ocp_qp_dim_create(N, &dim, malloc(d_ocp_qp_dim_memsize(N)));
  d_ocp_qp_dim_set_all(nxs, nus, nbx, nbu, ng, ns, &dim);
  int *block_size = malloc((N + 1) * sizeof(int));
  d_ocp_qp_dim_create(cond_N, &dim2, malloc(d_ocp_qp_dim_memsize(cond_N)));
  d_part_cond_qp_compute_block_size(N, cond_N, block_size);
  d_part_cond_qp_compute_dim(&dim, block_size, &dim2);

  struct d_ocp_qp qp, qp2;
  d_ocp_qp_create(&dim, &qp, malloc(d_ocp_qp_memsize(&dim)));
  d_ocp_qp_set_all_rowmaj(A, B, b, Q, S, R, q, r, idxbx, lbx, ubx, idxbu, lbu, ubu, C, D, lg, ug, Zl, Zu, zl, zu,
                          NULL, idxs_rev, ls, us, &qp);
  double *mask = calloc(1, sizeof(double));
  for (int k = 0; k <= N; ++k) d_ocp_qp_set_ug_mask(k, mask, &qp);  // the rows have no upper bound
  for (int k = 0; k < N; ++k) d_ocp_qp_set_lus_mask(k, mask, &qp);
  d_ocp_qp_create(&dim2, &qp2, malloc(d_ocp_qp_memsize(&dim2)));
  struct d_ocp_qp_sol sol, sol2;
  d_ocp_qp_sol_create(&dim, &sol, malloc(d_ocp_qp_sol_memsize(&dim)));
  d_ocp_qp_sol_create(&dim2, &sol2, malloc(d_ocp_qp_sol_memsize(&dim2)));

  struct d_part_cond_qp_arg cond_arg;
  d_part_cond_qp_arg_create(cond_N, &cond_arg, malloc(d_part_cond_qp_arg_memsize(cond_N)));
  d_part_cond_qp_arg_set_default(&cond_arg);
  struct d_part_cond_qp_ws cond_ws;
  d_part_cond_qp_ws_create(&dim, block_size, &dim2, &cond_arg, &cond_ws,
                           malloc(d_part_cond_qp_ws_memsize(&dim, block_size, &dim2, &cond_arg)));
  struct d_ocp_qp_ipm_arg arg;
  d_ocp_qp_ipm_arg_create(&dim2, &arg, malloc(d_ocp_qp_ipm_arg_memsize(&dim2)));
  d_ocp_qp_ipm_arg_set_default(SPEED, &arg);
  int iter_max = argc == 9 ? atoi(argv[8]) : 100;
  d_ocp_qp_ipm_arg_set_iter_max(&iter_max, &arg);
  d_ocp_qp_ipm_arg_set_tol_stat(&tol, &arg);
  d_ocp_qp_ipm_arg_set_tol_eq(&tol, &arg);
  d_ocp_qp_ipm_arg_set_tol_ineq(&tol, &arg);
  d_ocp_qp_ipm_arg_set_tol_comp(&tol, &arg);
  struct d_ocp_qp_ipm_ws ws;
  d_ocp_qp_ipm_ws_create(&dim2, &arg, &ws, malloc(d_ocp_qp_ipm_ws_memsize(&dim2, &arg)));

  double best[3] = {INFINITY, INFINITY, INFINITY};
  int status = -1, iterations = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    const double t0 = now();
    d_part_cond_qp_cond(&qp, &qp2, &cond_arg, &cond_ws);
    const double t1 = now();
    d_ocp_qp_ipm_solve(&qp2, &sol2, &arg, &ws);
    const double t2 = now();
    d_part_cond_qp_expand_sol(&qp, &sol2, &sol, &cond_arg, &cond_ws);
    const double t3 = now(), spans[3] = {t1 - t0, t2 - t1, t3 - t2};
    for (int i = 0; i < 3; ++i) best[i] = spans[i] < best[i] ? spans[i] : best[i];
  }
  d_ocp_qp_ipm_get_status(&ws, &status);
  d_ocp_qp_ipm_get_iter(&ws, &iterations);
  double objective = 0.0, *u0 = malloc(nu * sizeof(double));
  d_ocp_qp_ipm_get_obj(&ws, &objective);
  d_ocp_qp_sol_get_u(0, &sol, u0);
  printf("status %d\niterations %d\ncond_seconds %.9e\nipm_seconds %.9e\nexpand_seconds %.9e\nobjective %.17g\nu0",
         status, iterations, best[0], best[1], best[2], objective);
  for (int i = 0; i < nu; ++i) printf(" %.17g", u0[i]);
  printf("\n");
  return 0;
}
