"""Reference problems of ../shared/problems.md, written once over a small math backend (numpy or tinygrad)."""
