import pytest

from graphs import CycleError, DiGraph, NoPathError


def chain():
    return DiGraph([("a", "b"), ("b", "c"), ("c", "d")])


def test_nodes_and_edges():
    g = DiGraph([("a", "b", 2), ("a", "c")])
    g.add_node("z")
    assert g.nodes() == ["a", "b", "c", "z"]
    assert g.edges() == [("a", "b", 2), ("a", "c", 1)]
    assert len(g) == 4 and "z" in g and "q" not in g


def test_predecessors_and_successors():
    g = DiGraph([("a", "c"), ("b", "c"), ("c", "d")])
    assert g.predecessors("c") == ["a", "b"]
    assert g.successors("c") == ["d"]
    with pytest.raises(KeyError):
        g.predecessors("x")


def test_remove_edge():
    g = chain()
    g.remove_edge("b", "c")
    assert g.bfs("a") == ["a", "b"]
    with pytest.raises(KeyError):
        g.remove_edge("b", "c")


def test_negative_weight_rejected():
    with pytest.raises(ValueError):
        DiGraph().add_edge("a", "b", -1)


def test_bfs_order():
    g = DiGraph([(1, 2), (1, 3), (2, 4), (3, 4), (4, 5)])
    assert g.bfs(1) == [1, 2, 3, 4, 5]


def test_dfs_order():
    g = DiGraph([(1, 2), (1, 3), (2, 4), (3, 5)])
    assert g.dfs(1) == [1, 2, 4, 3, 5]


def test_traversal_handles_cycles():
    g = DiGraph([("a", "b"), ("b", "a"), ("b", "c")])
    assert g.bfs("a") == ["a", "b", "c"]
    assert g.dfs("a") == ["a", "b", "c"]


def test_traversal_unknown_start():
    with pytest.raises(KeyError):
        chain().bfs("x")


def test_reachable():
    g = chain()
    assert g.reachable("a", "d")
    assert not g.reachable("d", "a")


def _assert_topological(g, order):
    pos = {n: i for i, n in enumerate(order)}
    assert sorted(order, key=str) == sorted(g.nodes(), key=str)
    for u, v, _ in g.edges():
        assert pos[u] < pos[v]


def test_topological_sort_chain():
    assert chain().topological_sort() == ["a", "b", "c", "d"]


def test_topological_sort_dag():
    g = DiGraph([("shirt", "tie"), ("tie", "jacket"), ("trousers", "shoes"), ("trousers", "belt"), ("belt", "jacket"), ("socks", "shoes")])
    _assert_topological(g, g.topological_sort())


def test_cycle_detected_with_members():
    g = DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])
    with pytest.raises(CycleError) as exc:
        g.topological_sort()
    assert exc.value.cycle == ["a", "b", "c", "a"]
    assert g.has_cycle()


def test_self_loop_is_cycle():
    g = DiGraph([("a", "a")])
    assert g.has_cycle()


def test_dijkstra_simple():
    g = DiGraph([("a", "b", 1), ("b", "c", 2), ("a", "c", 5)])
    assert g.shortest_path("a", "c") == (3, ["a", "b", "c"])


def test_dijkstra_distances():
    g = DiGraph([("s", "a", 4), ("s", "b", 1), ("b", "a", 2), ("a", "t", 1), ("b", "t", 5)])
    dist, _ = g.dijkstra("s")
    assert dist == {"s": 0, "a": 3, "b": 1, "t": 4}


def test_shortest_path_to_self():
    assert chain().shortest_path("b", "b") == (0, ["b"])


def test_no_path():
    with pytest.raises(NoPathError):
        chain().shortest_path("d", "a")
