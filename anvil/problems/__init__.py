"""anvil.problems: the reference problems, each model written once over a small math backend (evaluated with numpy,
traced with tinygrad), for examples, tests and benchmarks.

P1 (`quadrotor`): a quadrotor, 12 states, 4 rotor thrusts. P2 (`cartpole`): a cart-pole, 4 states, 1 force; its
MPCs (`cartpole_mpc`) and its swing-up as a hand-written multiple-shooting NLP (`shooting`). `bicycle`: a
kinematic bicycle MPC avoiding a circular obstacle, 5 states, 2 inputs, with its IPOPT reference. P4 (`chain`): the
chain of masses, nx = 9 ... 39 states, 3 inputs, with the same NLP for CasADi's solvers.
"""
