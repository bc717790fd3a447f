"""Lookup tables and splines: data on a grid, interpolated inside traced functions."""

from anvil.tables.interpolant import Interpolant as Interpolant
from anvil.tables.interpolant import interpolant as interpolant
