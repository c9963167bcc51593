"""Sokoban: procedurally generated rooms (random walk + reverse play), BFS solver, text env."""
