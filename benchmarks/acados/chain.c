// acados on the chain-of-masses OCP of anvil/problems/chain.py, in closed loop (benchmarks/acados_chain.py builds and
// runs it): ERK (4 RK4 steps per stage), LINEAR_LS cost, |u| <= U_MAX, the wall as a soft lower bound on the y
// positions at stages 1..N-1, x_0 fixed to the state; HPIPM in SPEED mode, warm-started (qp_warm_start 2; a full
// SQP's first QP from the NLP's multipliers: warm_start_first_qp_from_nlp), every call from the previous solution
// shifted by one stage, primal and dual (x, u, pi, and lam, sl, su where neighbouring stages have the same rows), as
// anvil's controllers shift theirs. The model's functions (chain_model.h) and the problem's data (chain_data.h) are
// generated from anvil's chain module.
//
// Usage: chain <rti|sqp|sqp_exact> <cond_N: 0 = full condensing> <repeats> <tol> [regularization, sqp_exact]
// tol: the SQP's stationarity, equality, inequality and complementarity tolerances (acados's tol_stat, tol_eq,
// tol_ineq, tol_comp). Prints the closed loop's cost, its failed calls (nonzero status), the SQP and QP iterations of
// each step (first repeat), each step's wall time around ocp_nlp_solve (s, its least over the repeats: the same
// statistic bench_chain takes of anvil's controllers) and that repeat's time in the QPs (acados's time_qp).
#define _POSIX_C_SOURCE 199309L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acados_c/external_function_interface.h"
#include "acados_c/ocp_nlp_interface.h"
#include "chain_data.h"
#include "chain_model.h"

#define N HORIZON
#define NY (NX + NU)

typedef struct {
  int rti, exact, cond_N;
  double tol;
  ocp_nlp_reg_t regularization;
} config_t;

typedef struct {
  ocp_nlp_plan_t *plan;
  ocp_nlp_config *config;
  ocp_nlp_dims *dims;
  void *opts;
  ocp_nlp_in *in;
  ocp_nlp_out *out;
  ocp_nlp_solver *solver;
  external_function_external_param_casadi vde_forw[N], ode_fun[N], vde_adj[N], ode_hess[N];
} solver_t;

static const char *regularizations[] = {"NO_REGULARIZE", "MIRROR", "PROJECT", "PROJECT_REDUC_HESS", "CONVEXIFY",
                                        "GERSHGORIN_LEVENBERG_MARQUARDT"};

#define CASADI_FUNCTION(F, NAME)                                                                                   \
  do {                                                                                                             \
    (F).casadi_fun = (void *)&NAME;                                                                                \
    (F).casadi_n_in = &NAME##_n_in;                                                                                \
    (F).casadi_n_out = &NAME##_n_out;                                                                              \
    (F).casadi_sparsity_in = &NAME##_sparsity_in;                                                                  \
    (F).casadi_sparsity_out = &NAME##_sparsity_out;                                                                \
    (F).casadi_work = &NAME##_work;                                                                                \
    external_function_external_param_casadi_create(&(F), &function_opts);                                          \
  } while (0)

static void set_int(solver_t *s, const char *field, int value) {
  ocp_nlp_solver_opts_set(s->config, s->opts, field, &value);
}

static void set_double(solver_t *s, const char *field, double value) {
  ocp_nlp_solver_opts_set(s->config, s->opts, field, &value);
}

// plan, dimensions and options (the values acados's Python interface generates, but for the configuration)
static void create_solver(solver_t *s, const config_t *c) {
  s->plan = ocp_nlp_plan_create(N);
  s->plan->nlp_solver = c->rti ? SQP_RTI : SQP;
  s->plan->ocp_qp_solver_plan.qp_solver = c->cond_N ? PARTIAL_CONDENSING_HPIPM : FULL_CONDENSING_HPIPM;
  s->plan->relaxed_ocp_qp_solver_plan.qp_solver = s->plan->ocp_qp_solver_plan.qp_solver;
  for (int i = 0; i <= N; i++) s->plan->nlp_cost[i] = LINEAR_LS, s->plan->nlp_constraints[i] = BGH;
  for (int i = 0; i < N; i++) s->plan->nlp_dynamics[i] = CONTINUOUS_MODEL, s->plan->sim_solver_plan[i].sim_solver = ERK;
  s->plan->regularization = c->regularization;
  s->plan->globalization = FIXED_STEP;
  s->config = ocp_nlp_config_create(*s->plan);

  int nx[N + 1], nu[N + 1], zero[N + 1], ns[N + 1], ny[N + 1], nbx[N + 1], nbu[N + 1], nbxe[N + 1];
  for (int i = 0; i <= N; i++) nx[i] = NX, nu[i] = NU, zero[i] = 0, ns[i] = NWALL, ny[i] = NY, nbx[i] = NWALL;
  for (int i = 0; i <= N; i++) nbu[i] = NU, nbxe[i] = 0;
  nbx[0] = NX, ns[0] = 0, nbxe[0] = NX;
  nu[N] = 0, ns[N] = 0, ny[N] = NX, nbx[N] = 0, nbu[N] = 0;
  s->dims = ocp_nlp_dims_create(s->config);
  ocp_nlp_dims_set_opt_vars(s->config, s->dims, "nx", nx);
  ocp_nlp_dims_set_opt_vars(s->config, s->dims, "nu", nu);
  ocp_nlp_dims_set_opt_vars(s->config, s->dims, "nz", zero);
  ocp_nlp_dims_set_opt_vars(s->config, s->dims, "ns", ns);
  ocp_nlp_dims_set_opt_vars(s->config, s->dims, "np", zero);
  ocp_nlp_dims_set_global(s->config, s->dims, "np_global", 0);
  ocp_nlp_dims_set_global(s->config, s->dims, "n_global_data", 0);
  for (int i = 0; i <= N; i++) {
    ocp_nlp_dims_set_constraints(s->config, s->dims, i, "nbx", &nbx[i]);
    ocp_nlp_dims_set_constraints(s->config, s->dims, i, "nbu", &nbu[i]);
    ocp_nlp_dims_set_constraints(s->config, s->dims, i, "nsbx", &ns[i]);
    ocp_nlp_dims_set_constraints(s->config, s->dims, i, "nbxe", &nbxe[i]);
    const char *none[] = {"nsbu", "ng", "nsg", "nh", "nsh"};
    for (int k = 0; k < 5; k++) ocp_nlp_dims_set_constraints(s->config, s->dims, i, none[k], &zero[i]);
    ocp_nlp_dims_set_cost(s->config, s->dims, i, "ny", &ny[i]);
  }

  s->opts = ocp_nlp_solver_opts_create(s->config, s->dims);
  set_double(s, "globalization_fixed_step_length", 1.0);
  for (int i = 0; i < N; i++) {
    int steps = RK4_STEPS, stages = 4;
    ocp_nlp_solver_opts_set_at_stage(s->config, s->opts, i, "dynamics_num_steps", &steps);
    ocp_nlp_solver_opts_set_at_stage(s->config, s->opts, i, "dynamics_num_stages", &stages);
  }
  if (c->exact) {  // the exact Hessian's switches first (exact_hess_dyn: the ERK's adjoint and second order)
    const char *exact[] = {"exact_hess", "exact_hess_dyn", "exact_hess_cost", "exact_hess_constr"};
    for (int k = 0; k < 4; k++) set_int(s, exact[k], 1);
    set_int(s, "fixed_hess", 0);
  }
  bool warm_first = !c->rti;
  ocp_nlp_solver_opts_set(s->config, s->opts, "warm_start_first_qp", &warm_first);
  ocp_nlp_solver_opts_set(s->config, s->opts, "warm_start_first_qp_from_nlp", &warm_first);
  set_double(s, "levenberg_marquardt", 0.0);
  if (c->cond_N) set_int(s, "qp_cond_N", c->cond_N);
  set_int(s, "ext_qp_res", 0);
  ocp_nlp_solver_opts_set(s->config, s->opts, "qp_hpipm_mode", "SPEED");  // before the other QP options
  if (c->rti) {
    set_int(s, "as_rti_iter", 1);
    set_int(s, "as_rti_level", 4);
    set_int(s, "rti_phase", 0);  // preparation and feedback in one call
  } else {
    const char *tols[] = {"tol_stat", "tol_eq", "tol_ineq", "tol_comp"};
    for (int k = 0; k < 4; k++) set_double(s, tols[k], c->tol);
    set_double(s, "tol_min_step_norm", 0.0);
    set_int(s, "max_iter", 100);
  }
  if (c->exact) {  // the Python interface's defaults of the regularizations' options
    ocp_nlp_reg_t r = c->regularization;
    if (r == PROJECT || r == MIRROR || r == CONVEXIFY || r == GERSHGORIN_LEVENBERG_MARQUARDT)
      set_double(s, "reg_epsilon", 1e-4);
    if (r == PROJECT || r == MIRROR) {
      bool adaptive = false;
      set_double(s, "reg_max_cond_block", 1e7);
      set_double(s, "reg_min_epsilon", 1e-8);
      ocp_nlp_solver_opts_set(s->config, s->opts, "reg_adaptive_eps", &adaptive);
    }
  }
  set_int(s, "qp_iter_max", 50);
  set_int(s, "qp_warm_start", 2);
  set_int(s, "print_level", 0);
  if (c->cond_N) {  // the Python interface forces the Riccati variant 0 for PROJECT_REDUC_HESS
    int ric = c->exact && c->regularization == PROJECT_REDUC_HESS ? 0 : 1;
    set_int(s, "qp_cond_ric_alg", ric);
    set_int(s, "qp_ric_alg", ric);
  }
  s->out = ocp_nlp_out_create(s->config, s->dims);
  s->in = ocp_nlp_in_create(s->config, s->dims);
}

// the model's functions and the problem's data
static void set_problem(solver_t *s, const config_t *c) {
  external_function_opts function_opts;
  external_function_opts_set_to_default(&function_opts);
  function_opts.external_workspace = true;
  for (int i = 0; i < N; i++) {
    CASADI_FUNCTION(s->vde_forw[i], chain_expl_vde_forw);
    CASADI_FUNCTION(s->ode_fun[i], chain_expl_ode_fun);
    CASADI_FUNCTION(s->vde_adj[i], chain_expl_vde_adj);
    ocp_nlp_dynamics_model_set_external_param_fun(s->config, s->dims, s->in, i, "expl_vde_forw", &s->vde_forw[i]);
    ocp_nlp_dynamics_model_set_external_param_fun(s->config, s->dims, s->in, i, "expl_ode_fun", &s->ode_fun[i]);
    ocp_nlp_dynamics_model_set_external_param_fun(s->config, s->dims, s->in, i, "expl_vde_adj", &s->vde_adj[i]);
    if (c->exact) {
      CASADI_FUNCTION(s->ode_hess[i], chain_expl_ode_hess);
      ocp_nlp_dynamics_model_set_external_param_fun(s->config, s->dims, s->in, i, "expl_ode_hess", &s->ode_hess[i]);
    }
  }
  double ts = TS, one = 1.0;
  for (int i = 0; i < N; i++) ocp_nlp_in_set(s->config, s->dims, s->in, i, "Ts", &ts);
  for (int i = 0; i <= N; i++) ocp_nlp_cost_model_set(s->config, s->dims, s->in, i, "scaling", &one);
  // stage cost TS (e'diag(q)e + 1e-2 u'u) = 1/2 |y - y_ref|^2_W with W = 2 TS diag(q, 1e-2), y = [x; u]
  double W[NY * NY] = {0}, Vx[NY * NX] = {0}, Vu[NY * NU] = {0}, y_ref[NY] = {0};
  for (int j = 0; j < NX; j++) W[j + NY * j] = 2.0 * TS * QW[j], Vx[j + NY * j] = 1.0, y_ref[j] = X_REST[j];
  for (int j = 0; j < NU; j++) W[NX + j + NY * (NX + j)] = 2.0 * TS * 1e-2, Vu[NX + j + NY * j] = 1.0;
  for (int i = 0; i < N; i++) {
    ocp_nlp_cost_model_set(s->config, s->dims, s->in, i, "W", W);
    ocp_nlp_cost_model_set(s->config, s->dims, s->in, i, "Vx", Vx);
    ocp_nlp_cost_model_set(s->config, s->dims, s->in, i, "Vu", Vu);
    ocp_nlp_cost_model_set(s->config, s->dims, s->in, i, "yref", y_ref);
  }
  // terminal cost e'diag(q)e = 1/2 |x - x_rest|^2_{2 diag(q)}
  double We[NX * NX] = {0}, Vxe[NX * NX] = {0};
  for (int j = 0; j < NX; j++) We[j + NX * j] = 2.0 * QW[j], Vxe[j + NX * j] = 1.0;
  ocp_nlp_cost_model_set(s->config, s->dims, s->in, N, "W", We);
  ocp_nlp_cost_model_set(s->config, s->dims, s->in, N, "Vx", Vxe);
  ocp_nlp_cost_model_set(s->config, s->dims, s->in, N, "yref", (void *)X_REST);
  // the wall's slack s costs TS (L1 s + L2 s^2) = zl s + 1/2 Zl s^2; its upper side is infinite (1e10: dropped)
  double zl[NWALL], Zl[NWALL];
  for (int j = 0; j < NWALL; j++) zl[j] = TS * WALL_L1, Zl[j] = TS * 2.0 * WALL_L2;
  for (int i = 1; i < N; i++) {
    const char *fields[] = {"zl", "Zl", "zu", "Zu"};
    for (int k = 0; k < 4; k++) ocp_nlp_cost_model_set(s->config, s->dims, s->in, i, fields[k], k % 2 ? Zl : zl);
  }
  int idx0[NX], idxbu[NU], idxbx[NWALL], idxsbx[NWALL];
  double lbu[NU], ubu[NU], lbx[NWALL], ubx[NWALL];
  for (int j = 0; j < NX; j++) idx0[j] = j;
  for (int j = 0; j < NU; j++) idxbu[j] = j, lbu[j] = -U_MAX, ubu[j] = U_MAX;
  for (int j = 0; j < NWALL; j++) idxbx[j] = WALL_IDX[j], idxsbx[j] = j, lbx[j] = WALL, ubx[j] = 1e10;
  ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, 0, "idxbx", idx0);
  ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, 0, "idxbxe", idx0);
  for (int i = 0; i < N; i++) {
    ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, i, "idxbu", idxbu);
    ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, i, "lbu", lbu);
    ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, i, "ubu", ubu);
  }
  for (int i = 1; i < N; i++) {
    ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, i, "idxbx", idxbx);
    ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, i, "lbx", lbx);
    ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, i, "ubx", ubx);
    ocp_nlp_constraints_model_set(s->config, s->dims, s->in, s->out, i, "idxsbx", idxsbx);
  }
}

static void destroy_solver(solver_t *s, const config_t *c) {
  ocp_nlp_solver_destroy(s->solver);
  ocp_nlp_in_destroy(s->in);
  ocp_nlp_out_destroy(s->out);
  ocp_nlp_solver_opts_destroy(s->opts);
  ocp_nlp_dims_destroy(s->dims);
  ocp_nlp_config_destroy(s->config);
  ocp_nlp_plan_destroy(s->plan);
  for (int i = 0; i < N; i++) {
    external_function_external_param_casadi_free(&s->vde_forw[i]);
    external_function_external_param_casadi_free(&s->ode_fun[i]);
    external_function_external_param_casadi_free(&s->vde_adj[i]);
    if (c->exact) external_function_external_param_casadi_free(&s->ode_hess[i]);
  }
}

// the plant: RK4_STEPS classical RK4 steps of TS / RK4_STEPS of the generated ODE (its work arrays: checked in main)
#define ODE_W 4096
#define ODE_IW 256
static void ode(const double *x, const double *u, double *xdot) {
  static double w[ODE_W];
  static int iw[ODE_IW];
  const double *arg[3] = {x, u, NULL};
  double *res[1] = {xdot};
  chain_expl_ode_fun(arg, res, iw, w, 0);
}

static void plant(double *x, const double *u) {
  const double h = TS / RK4_STEPS;
  double k1[NX], k2[NX], k3[NX], k4[NX], t[NX];
  for (int step = 0; step < RK4_STEPS; step++) {
    ode(x, u, k1);
    for (int j = 0; j < NX; j++) t[j] = x[j] + h / 2 * k1[j];
    ode(t, u, k2);
    for (int j = 0; j < NX; j++) t[j] = x[j] + h / 2 * k2[j];
    ode(t, u, k3);
    for (int j = 0; j < NX; j++) t[j] = x[j] + h * k3[j];
    ode(t, u, k4);
    for (int j = 0; j < NX; j++) x[j] += h / 6 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
  }
}

static double stage_cost(const double *x, const double *u) {
  double cost = 0;
  for (int j = 0; j < NX; j++) cost += QW[j] * (x[j] - X_REST[j]) * (x[j] - X_REST[j]);
  for (int j = 0; j < NU; j++) cost += 1e-2 * u[j] * u[j];
  return TS * cost;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct {
  double seconds[CL_STEPS], qp_seconds[CL_STEPS], cost;
  int sqp_iterations[CL_STEPS], qp_iterations[CL_STEPS], failures;
} loop_t;

// the solution shifted by one stage: each field of stage k from stage k + 1 where both stages have its size (the last
// stage's, and stage 0's rows, which fix x_0, keep their own)
static void shift(solver_t *s) {
  static const char *fields[] = {"x", "u", "pi", "lam", "sl", "su"};
  double buffer[4 * (NX + NU + NWALL) + 8];
  for (int k = 0; k < N; k++)
    for (int f = 0; f < 6; f++) {
      if (k + 1 == N && strcmp(fields[f], "x") != 0) continue;
      const int here = ocp_nlp_dims_get_from_attr(s->config, s->dims, s->out, k, fields[f]);
      const int next = ocp_nlp_dims_get_from_attr(s->config, s->dims, s->out, k + 1, fields[f]);
      if (here == 0 || here != next || here > (int)(sizeof buffer / sizeof buffer[0])) continue;
      ocp_nlp_out_get(s->config, s->dims, s->out, k + 1, fields[f], buffer);
      ocp_nlp_out_set(s->config, s->dims, s->out, s->in, k, fields[f], buffer);
    }
}

// the closed loop from X_INIT, each call from the previous solution shifted by one stage (the first from x_k = x0,
// u_k = 0)
static void closed_loop(const config_t *c, loop_t *r) {
  solver_t s;
  create_solver(&s, c);
  set_problem(&s, c);
  s.solver = ocp_nlp_solver_create(s.config, s.dims, s.opts, s.in);
  if (ocp_nlp_precompute(s.solver, s.in, s.out)) fprintf(stderr, "chain: ocp_nlp_precompute failed\n"), exit(1);
  double x[NX], u[NU] = {0};
  memcpy(x, X_INIT, sizeof x);
  for (int i = 0; i <= N; i++) ocp_nlp_out_set(s.config, s.dims, s.out, s.in, i, "x", x);
  for (int i = 0; i < N; i++) ocp_nlp_out_set(s.config, s.dims, s.out, s.in, i, "u", u);
  r->cost = 0, r->failures = 0;
  for (int t = 0; t < CL_STEPS; t++) {
    ocp_nlp_constraints_model_set(s.config, s.dims, s.in, s.out, 0, "lbx", x);
    ocp_nlp_constraints_model_set(s.config, s.dims, s.in, s.out, 0, "ubx", x);
    if (t > 0) shift(&s);
    const double start = now();
    const int status = ocp_nlp_solve(s.solver, s.in, s.out);
    r->seconds[t] = now() - start;
    ocp_nlp_get(s.solver, "time_qp", &r->qp_seconds[t]);  // the QPs' time, condensing included
    int sqp = 0, qp = 0, stat_n = 0, stat_m = 0;
    ocp_nlp_get(s.solver, "sqp_iter", &sqp);
    if (c->rti) {
      ocp_nlp_get(s.solver, "qp_iter", &qp);
    } else {  // the QP iterations of every SQP iteration (column 5 of the statistics)
      double *stat;
      ocp_nlp_get(s.solver, "stat", &stat);
      ocp_nlp_get(s.solver, "stat_n", &stat_n);
      ocp_nlp_get(s.solver, "stat_m", &stat_m);
      for (int i = 1; i <= sqp && i < stat_m; i++) qp += (int)stat[stat_n * i + 5];
    }
    r->sqp_iterations[t] = sqp, r->qp_iterations[t] = qp, r->failures += status != 0;
    ocp_nlp_out_get(s.config, s.dims, s.out, 0, "u", u);
    r->cost += stage_cost(x, u);
    plant(x, u);
  }
  destroy_solver(&s, c);
}

int main(int argc, char **argv) {
  if (argc < 5)
    return fprintf(stderr, "usage: chain <rti|sqp|sqp_exact> <cond_N> <repeats> <tol> [regularization]\n"), 2;
  config_t c = {strcmp(argv[1], "rti") == 0, strcmp(argv[1], "sqp_exact") == 0, atoi(argv[2]), atof(argv[4]),
                NO_REGULARIZE};
  const int repeats = atoi(argv[3]);
  int n_arg, n_res, n_iw, n_w;
  chain_expl_ode_fun_work(&n_arg, &n_res, &n_iw, &n_w);
  if (n_w > ODE_W || n_iw > ODE_IW) return fprintf(stderr, "chain: the ODE's work arrays exceed the plant's\n"), 1;
  int k = 0, n = (int)(sizeof regularizations / sizeof regularizations[0]);
  while (argc > 5 && k < n && strcmp(argv[5], regularizations[k]) != 0) k++;
  if (k == n) return fprintf(stderr, "chain: unknown regularization %s\n", argv[5]), 2;
  c.regularization = (ocp_nlp_reg_t)k;
  static loop_t first, loop;
  static double fastest[CL_STEPS], fastest_qp[CL_STEPS];
  for (int r = 0; r < repeats; r++) {
    closed_loop(&c, r ? &loop : &first);
    const loop_t *run = r ? &loop : &first;
    for (int t = 0; t < CL_STEPS; t++)
      if (r == 0 || run->seconds[t] < fastest[t]) fastest[t] = run->seconds[t], fastest_qp[t] = run->qp_seconds[t];
  }
  printf("cost %.12g\nfailures %d\nsqp_iterations", first.cost, first.failures);
  for (int t = 0; t < CL_STEPS; t++) printf(" %d", first.sqp_iterations[t]);
  printf("\nqp_iterations");
  for (int t = 0; t < CL_STEPS; t++) printf(" %d", first.qp_iterations[t]);
  printf("\nseconds");
  for (int t = 0; t < CL_STEPS; t++) printf(" %.9g", fastest[t]);
  printf("\nqp_seconds");
  for (int t = 0; t < CL_STEPS; t++) printf(" %.9g", fastest_qp[t]);
  printf("\n");
  return 0;
}
