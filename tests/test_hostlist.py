"""railyard.hostlist's short cuts give what ClusterShell's NodeSet gives, name for name."""

from __future__ import annotations

import pytest
from ClusterShell.NodeSet import NodeSet
from hypothesis import given, settings
from hypothesis import strategies as st

from railyard.hostlist import HostlistError, expand, fold, refold

prefixes = st.sampled_from(["gpu", "n", "", "su1-rail", "a.b-", "x_", "lf3-", "login"])
numbers = st.integers(0, 3000).flatmap(lambda i: st.sampled_from([str(i), f"{i:03d}", f"{i:05d}"]))
suffixes = st.sampled_from(["", "-ib", "x", "-0"])
names = st.lists(st.builds(lambda p, n, s: f"{p}{n}{s}", prefixes, numbers, suffixes), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(names)
def test_fold_is_clustershells(ns: list[str]) -> None:
    assert fold(ns) == str(NodeSet.fromlist(ns))


@settings(max_examples=300, deadline=None)
@given(prefixes, st.lists(st.integers(0, 500), min_size=1, max_size=20), st.sampled_from([0, 3]), suffixes)
def test_expand_one_range_is_clustershells(prefix: str, ints: list[int], pad: int, suffix: str) -> None:
    chunk = f"{prefix}[{','.join(f'{i:0{pad}d}' for i in ints)}]{suffix}"
    assert expand(chunk) == list(NodeSet(chunk))


@settings(max_examples=300, deadline=None)
@given(prefixes, st.integers(0, 3000), st.integers(0, 3000), st.sampled_from([0, 1, 3, 4, 5]), st.sampled_from([0, 3, 5]),
       suffixes)
def test_expand_one_span_is_clustershells(prefix: str, lo: int, hi: int, pad_lo: int, pad_hi: int, suffix: str) -> None:
    # ends of as many digits (counted out by railyard) and of different widths (RangeSet's)
    chunk = f"{prefix}[{min(lo, hi):0{pad_lo}d}-{max(lo, hi):0{pad_hi}d}]{suffix}"
    try:
        expected = list(NodeSet(chunk))
    except Exception:  # noqa: BLE001 - ClusterShell refuses mismatched padding: so must railyard
        with pytest.raises(HostlistError):
            expand(chunk)
        return
    assert expand(chunk) == expected


@settings(max_examples=300, deadline=None)
@given(prefixes, st.integers(0, 3000), st.integers(1, 400), st.sampled_from([0, 3, 4]), st.booleans())
def test_fold_and_refold_of_one_run_are_clustershells(prefix: str, first: int, count: int, pad: int, gap: bool) -> None:
    numbers = [first + i + (1 if gap and i > count // 2 else 0) for i in range(count)]
    ns = [f"{prefix}{i:0{pad}d}" for i in numbers]
    assert fold(ns) == str(NodeSet.fromlist(ns))
    span = f"{prefix}[{numbers[0]:0{pad}d}-{numbers[-1]:0{pad}d}]"
    assert refold(span) == str(NodeSet(span))


def test_one_run_folds_to_its_ends() -> None:
    assert fold(["n0098", "n0099", "n0100"]) == "n[0098-0100]"
    assert fold(["n7"]) == "n7"
    assert fold(["n1", "n3"]) == "n[1,3]"
    assert refold("n[0098-0100]") == "n[0098-0100]"
    assert refold("n[5-5]-ib") == "n5-ib"


def test_expand_counts_out_a_span_with_its_padding() -> None:
    assert expand("n[0098-0101]-ib") == ["n0098-ib", "n0099-ib", "n0100-ib", "n0101-ib"]
    assert expand("gpu[8-9]") == ["gpu8", "gpu9"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.builds(lambda p, ints, pad, s: f"{p}[{','.join(f'{i:0{pad}d}' for i in ints)}]{s}",
                          prefixes, st.lists(st.integers(0, 500), min_size=1, max_size=8),
                          st.sampled_from([0, 3]), suffixes) | names.map(",".join),
                min_size=1, max_size=5))
def test_refold_is_fold_of_expand(parts: list[str]) -> None:
    hostlist = ",".join(parts)
    assert refold(hostlist) == fold(expand(hostlist))


def test_expand_keeps_the_written_order_across_commas() -> None:
    assert expand("gpu[003-004],kw1,gpu[001-002]") == ["gpu003", "gpu004", "kw1", "gpu001", "gpu002"]
    assert expand("su[1-2]-rail[0-1]") == ["su1-rail0", "su1-rail1", "su2-rail0", "su2-rail1"]


@pytest.mark.parametrize("bad", ["gpu[0001-16384]", "gpu[3-1]", "gpu[1-2"])
def test_a_bad_range_is_worded_as_clustershell_words_it(bad: str) -> None:
    with pytest.raises(HostlistError, match="is not a valid hostlist") as exc:
        expand(bad)
    try:
        NodeSet(bad)
    except Exception as cs:  # noqa: BLE001 - whichever error ClusterShell raises
        assert str(cs) in str(exc.value)
