"""Maze generation: determinism, spanning-tree structure, solvability, validation."""

import pytest

from cluster_jobs.maze.generator import Maze, MazeError, generate_maze


def test_same_seed_gives_the_same_maze():
    assert generate_maze(9, 7) == generate_maze(9, 7)


def test_different_seeds_give_different_mazes():
    grids = {generate_maze(9, seed).to_text() for seed in range(50)}
    assert len(grids) >= 45


def test_known_maze_is_stable_across_runs_and_platforms():
    assert generate_maze(9, 0).to_text() == (
        "#########\n#.......#\n###.###.#\n#.#...#.#\n#.#.#.#.#\n#...#.#.#\n###.###.#\n#...#...#\n#########"
    )


@pytest.mark.parametrize("size", [5, 9, 11, 21])
def test_every_maze_is_a_spanning_tree_from_corner_to_corner(size):
    for seed in range(30):
        maze = generate_maze(size, seed)
        rooms = ((size - 1) // 2) ** 2
        open_cells = [(r, c) for r in range(size) for c in range(size) if not maze.is_wall((r, c))]
        assert len(open_cells) == 2 * rooms - 1  # rooms + (rooms - 1) tree edges
        assert all(maze.is_wall((0, i)) and maze.is_wall((size - 1, i)) for i in range(size))
        assert all(maze.is_wall((i, 0)) and maze.is_wall((i, size - 1)) for i in range(size))
        assert maze.start == (1, 1) and maze.target == (size - 2, size - 2)
        path = maze.shortest_path()
        assert path[0] == maze.start and path[-1] == maze.target
        assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(path, path[1:], strict=False))
        assert not any(maze.is_wall(pos) for pos in path)
        assert maze.shortest_path_length() == len(path) - 1 >= 2 * (size - 3)


def test_to_text_and_is_wall_agree():
    maze = generate_maze(11, 3)
    rows = maze.to_text().split("\n")
    assert len(rows) == 11 and all(len(row) == 11 for row in rows)
    for r, row in enumerate(rows):
        for c, char in enumerate(row):
            assert char in "#."
            assert maze.is_wall((r, c)) == (char == "#")
    assert maze.is_wall((-1, 0)) and maze.is_wall((0, 11))


@pytest.mark.parametrize("size", [4, 8, 3, 1, 0, -5, 103, 9.0, "9", True, None])
def test_invalid_size_is_rejected(size):
    with pytest.raises(MazeError, match="size"):
        generate_maze(size, 0)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", None, True])
def test_invalid_seed_is_rejected(seed):
    with pytest.raises(MazeError, match="seed"):
        generate_maze(9, seed)


def test_unreachable_target_is_reported():
    maze = generate_maze(5, 0)
    walls = [list(row) for row in maze.walls]
    walls[3][2] = walls[2][3] = True  # close the cells around the target (3, 3)
    closed = Maze(size=5, walls=tuple(map(tuple, walls)), start=(1, 1), target=(3, 3), seed=0)
    with pytest.raises(MazeError, match="unreachable"):
        closed.shortest_path_length()


def test_maze_rejects_inconsistent_fields():
    maze = generate_maze(5, 0)
    with pytest.raises(MazeError, match="walls"):
        Maze(size=5, walls=maze.walls[:4], start=(1, 1), target=(3, 3), seed=0)
    with pytest.raises(MazeError, match="start"):
        Maze(size=5, walls=maze.walls, start=(0, 0), target=(3, 3), seed=0)
