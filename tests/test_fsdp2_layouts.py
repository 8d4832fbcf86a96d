"""Units × phases from FSDP2's own ranges in every layout people run (issue 40 part A), on traces written
the way each torch version writes its labels.

Each test builds one CUDA-style step (host ranges on the Python and autograd threads, each kernel launched
by a ``cudaLaunchKernel`` at a known point) and checks every kernel's (unit, phase) against a table
written by hand. The label strings are those of the versions' sources (docs/attribution.md "FSDP2's
labels by torch version"; reference: shared/reference/fsdp_ranges.md):

* torch 2.3.1/2.4.x ``torch/distributed/_composable/fsdp/_fsdp_param_group.py`` (2.4.0 :276, :284, :300,
  :308, :311, :337, :374) and ``_fsdp_state.py`` (:82 ``FSDP::root_pre_forward``, :212
  ``FSDP::root_post_backward_callback``): plain literals, no FQN; 2.3 has no ``post_backward_accumulate``;
  the prefetch is ``FSDP::backward_prefetch``, with no target;
* torch 2.5–2.11 ``_with_fqn`` (2.5.0 ``_fsdp_param_group.py:564``): ``FSDP::<hook> (<fqn>)``, no suffix
  for the root's group (FQN ""), several modules of one group joined by ", ";
* torch 2.12–2.14: `` [pg=N]`` with several parameter groups (2.13.0 ``_fsdp_param_group.py:1017-1022``)
  and ``FSDP::post_backward_rs_wait (<fqn>)`` before the reduce from the second group on (2.13.0 :653);
* torch 2.15.0: no ``post_backward_accumulate`` (post-backward opens with ``post_backward_reshard``,
  :711) and ``FSDP::finalize_backward`` (``_fsdp_state.py:466``) inside the callback;
* torch_npu (Ascend/pytorch master 9e73e70 ``_add_fsdp_patch.py:137-155``, v26.x builds for torch
  2.7.1–2.13): ``post_forward`` returns early while ``_skip_post_forward`` is set (by an earlier
  post-forward, cleared in post-backward): no ``FSDP::post_forward (…)`` in a second forward.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import orjson
import pytest

from fsdpbench.analysis.rank import attribution, unit_ranges
from fsdpbench.trace.kineto import read_kineto
from helpers import raw_ns, raw_outermost, raw_training_ops, raw_x_events, run_cli

MAIN, AUTOGRAD, STREAM, COMM_STREAM = 100, 300, 7, 8


class Step:
    """A CUDA-style trace written range by range: a clock that moves 1 µs per action, ranges nested by
    ``with``, kernels launched at the clock (each runs later on its stream, 1 µs long)."""

    def __init__(self) -> None:
        self.events: list[dict] = [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": AUTOGRAD, "args": {"name": "autograd"}},
        ]
        self.now = 0.0
        self.corr = 0
        self.device_now = 100_000.0
        self.tid = MAIN

    @contextmanager
    def r(self, name: str, cat: str = "user_annotation") -> Iterator[None]:
        start = self.now
        self.now += 1.0
        yield
        self.now += 1.0
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 1,
                "tid": self.tid,
                "ts": start,
                "dur": self.now - start,
            }
        )

    def mark(self, name: str) -> None:
        """A range with nothing inside it."""
        with self.r(name):
            pass

    def k(self, tag: str, comm: str | None = None) -> None:
        """Launch kernel ``tag`` (a collective of type ``comm``, e.g. ``AllGather``, when given)."""
        self.corr += 1
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": self.tid,
                "ts": self.now,
                "dur": 0.5,
                "args": {"correlation": self.corr},
            }
        )
        name = f"ncclDevKernel_{comm}_RING_LL({tag})" if comm else f"gemm_{tag}"
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": COMM_STREAM if comm else STREAM,
                "ts": self.device_now,
                "dur": 1.0,
                "args": {"correlation": self.corr},
            }
        )
        self.device_now += 2.0
        self.now += 1.0

    def write(self, path: Path) -> Path:
        path.write_bytes(orjson.dumps({"traceEvents": self.events}))
        return path


_TAG = re.compile(r"gemm_(\w+)|ncclDevKernel_\w+?_RING_LL\((\w+)\)")


def placed(path: Path) -> dict[str, tuple[str, str]]:
    """Every kernel's tag → the (unit, phase) fsdpbench gives it."""
    t = read_kineto(path).table
    p = attribution.place(t, "device")
    names = np.asarray(t.name.categories, dtype=object)[t.name.codes[p.rows]]
    out = {}
    for name, unit, phase in zip(names.tolist(), p.unit.tolist(), p.phase.tolist(), strict=True):
        m = _TAG.fullmatch(name)
        assert m is not None, name
        out[m.group(1) or m.group(2)] = (unit, phase)
    return out


class Labels:
    """FSDP2's labels as one torch version writes them (module docstring)."""

    def __init__(self, version: str) -> None:
        self.version = version

    def hook(self, hook: str, fqn: str) -> str:
        if self.version in ("2.3", "2.4"):
            return f"FSDP::{hook}"  # no FQN before 2.5
        return f"FSDP::{hook} ({fqn})" if fqn else f"FSDP::{hook}"

    def post_backward(self, s: Step, fqn: str, rs_tag: str, rs_wait: bool = False) -> None:
        """FSDP2's post-backward of one group: accumulate (2.4–2.14), reshard, rs_wait (2.12+, from the
        second group on), reduce with the reduce-scatter launched inside."""
        if self.version not in ("2.3", "2.15"):
            s.mark(self.hook("post_backward_accumulate", fqn))
        s.mark(self.hook("post_backward_reshard", fqn))
        if rs_wait and self.version in ("2.12", "2.15"):
            s.mark(f"FSDP::post_backward_rs_wait ({fqn})")
        with s.r(self.hook("post_backward_reduce", fqn)):
            s.k(rs_tag, "ReduceScatter")


OPT = "Optimizer.step#AdamW.step"


def _optimizer(s: Step) -> None:
    s.tid = MAIN
    with s.r(OPT):
        s.k("opt")


# ------------------------------------------------------------------ 1. a root without parameters (torchtitan)


def _torchtitan_step(v: Labels) -> Step:
    """torchtitan's apply_fsdp: fully_shard(tok_embeddings), each layer, [norm, output], then the model,
    whose root holds no parameter: no bare pre/post_forward, only root_pre_forward and the callback."""
    s = Step()
    with s.r("ProfilerStep#1"):
        s.mark("FSDP::root_pre_forward")
        with s.r(v.hook("pre_forward", "tok_embeddings")):
            s.k("ag_emb", "AllGather")
        s.k("emb_fwd")
        s.mark(v.hook("post_forward", "tok_embeddings"))
        for i in (0, 1):
            with s.r(v.hook("pre_forward", f"layers.{i}")):
                s.k(f"ag_l{i}", "AllGather")
            s.k(f"l{i}_fwd")
            s.mark(v.hook("post_forward", f"layers.{i}"))
            s.k(f"glue{i}_fwd")  # between units: the root's forward
        with s.r(v.hook("pre_forward", "norm, output")):
            s.k("ag_out", "AllGather")
        s.k("out_fwd")
        s.mark(v.hook("post_forward", "norm, output"))
        s.k("loss_fwd")  # after the model's forward (the loss): no unit's
        s.tid = AUTOGRAD
        s.k("loss_bwd")  # before FSDP's first backward range
        with s.r(v.hook("pre_backward", "norm, output")):
            s.k("ag_out_b", "AllGather")
        s.k("out_bwd")
        v.post_backward(s, "norm, output", "rs_out")
        for i in (1, 0):
            with s.r(v.hook("pre_backward", f"layers.{i}")):
                s.k(f"ag_l{i}_b", "AllGather")
            s.k(f"l{i}_bwd")
            v.post_backward(s, f"layers.{i}", f"rs_l{i}", rs_wait=True)
            s.k(f"glue{i}_bwd")
        s.mark(v.hook("pre_backward", "tok_embeddings"))
        s.k("emb_bwd")
        with s.r("FSDP::root_post_backward_callback"):
            # the embedding's input needs no grad: its post-backward runs in the callback (2.13
            # _fsdp_state.py:397-415)
            v.post_backward(s, "tok_embeddings", "rs_emb", rs_wait=True)
            if v.version == "2.15":
                s.mark("FSDP::finalize_backward")
        _optimizer(s)
    return s


TORCHTITAN = {
    "ag_emb": ("tok_embeddings", "forward"),
    "emb_fwd": ("tok_embeddings", "forward"),
    "ag_l0": ("layers.0", "forward"),
    "l0_fwd": ("layers.0", "forward"),
    "glue0_fwd": ("root", "forward"),
    "ag_l1": ("layers.1", "forward"),
    "l1_fwd": ("layers.1", "forward"),
    "glue1_fwd": ("root", "forward"),
    "ag_out": ("norm, output", "forward"),
    "out_fwd": ("norm, output", "forward"),
    "loss_fwd": ("(outside)", "(outside)"),  # after the last forward range: outside the model
    "loss_bwd": ("(outside)", "(outside)"),
    "ag_out_b": ("norm, output", "backward"),
    "out_bwd": ("norm, output", "backward"),
    "rs_out": ("norm, output", "backward"),
    "ag_l1_b": ("layers.1", "backward"),
    "l1_bwd": ("layers.1", "backward"),
    "rs_l1": ("layers.1", "backward"),
    "glue1_bwd": ("root", "backward"),
    "ag_l0_b": ("layers.0", "backward"),
    "l0_bwd": ("layers.0", "backward"),
    "rs_l0": ("layers.0", "backward"),
    "glue0_bwd": ("root", "backward"),
    "emb_bwd": ("tok_embeddings", "backward"),
    "rs_emb": ("tok_embeddings", "backward"),  # not the root's: the callback's window crosses the embedding's
    "opt": ("(all)", "optimizer"),
}


@pytest.mark.parametrize("version", ["2.5", "2.12", "2.15"])
def test_a_root_without_parameters_gets_the_work_between_units_and_not_the_embeddings_reduce_scatter(
    tmp_path, version
):
    """torchtitan's layout: the root's forward runs from root_pre_forward to the last unit's
    post_forward, its backward from the first backward range to the callback's end, and the embedding's
    reduce-scatter (inside the callback) stays the embedding's."""
    path = _torchtitan_step(Labels(version)).write(tmp_path / "rank0.json")
    assert placed(path) == TORCHTITAN


# ------------------------------------------------------------------ 2. torch 2.3/2.4: no FQN in any label


def _unnamed_step(v: Labels) -> Step:
    """tests/plain_fsdp2.py's layout (each block, then the model, whose root keeps the embedding and the
    head) as torch 2.3/2.4 write it, with the profiler's nn.Module ranges (with_stack) around the blocks."""
    s = Step()
    with s.r("ProfilerStep#1"):
        s.mark("FSDP::root_pre_forward")
        with s.r("FSDP::pre_forward"):
            s.k("ag_root", "AllGather")
        s.k("embed_fwd")
        for i in (0, 1):
            with s.r(f"nn.Module: Block_{i}", cat="python_function"):
                with s.r("FSDP::pre_forward"):
                    s.k(f"ag_b{i}", "AllGather")
                s.k(f"b{i}_fwd")
                s.mark("FSDP::post_forward")
        s.k("head_fwd")
        s.mark("FSDP::post_forward")
        s.tid = AUTOGRAD
        with s.r("FSDP::pre_backward"):
            with s.r("FSDP::backward_prefetch"):  # 2.4: the root prefetches block 1, named nowhere
                s.k("ag_b1_prefetch", "AllGather")
        s.k("head_bwd")
        s.mark("FSDP::pre_backward")
        s.k("b1_bwd")
        v.post_backward(s, "", "rs_b1")
        with s.r("FSDP::pre_backward"):
            s.k("ag_b0_b", "AllGather")
        s.k("b0_bwd")
        v.post_backward(s, "", "rs_b0")
        s.k("embed_bwd")
        with s.r("FSDP::root_post_backward_callback"):
            v.post_backward(s, "", "rs_root")
        _optimizer(s)
    return s


UNNAMED = {
    "ag_root": ("root", "forward"),
    "embed_fwd": ("root", "forward"),
    "ag_b0": ("unit#1 (Block)", "forward"),
    "b0_fwd": ("unit#1 (Block)", "forward"),
    "ag_b1": ("unit#2 (Block)", "forward"),
    "b1_fwd": ("unit#2 (Block)", "forward"),
    "head_fwd": ("root", "forward"),
    "ag_b1_prefetch": ("root", "backward"),
    "head_bwd": ("root", "backward"),
    "b1_bwd": ("unit#2 (Block)", "backward"),
    "rs_b1": ("unit#2 (Block)", "backward"),
    "ag_b0_b": ("unit#1 (Block)", "backward"),
    "b0_bwd": ("unit#1 (Block)", "backward"),
    "rs_b0": ("unit#1 (Block)", "backward"),
    "embed_bwd": ("root", "backward"),
    "rs_root": ("root", "backward"),
    "opt": ("(all)", "optimizer"),
}


@pytest.mark.parametrize("version", ["2.3", "2.4"])
def test_unnamed_units_of_torch_2_3_and_2_4_are_numbered_in_forward_order(tmp_path, version):
    """No FQN anywhere: the root's group is the window around the others, the blocks unit#1, unit#2 with
    their module type, backward windows in reverse order; the output says the units are unnamed, and the
    prefetch the root issued has an unknown target, not "none"."""
    path = _unnamed_step(Labels(version)).write(tmp_path / "rank0.json")
    assert placed(path) == UNNAMED
    t = read_kineto(path).table
    r = unit_ranges.find_ranges(t)
    assert any("name no module" in n for n in r.notes)
    assert [(e["unit"], e["pass"], e["target"]) for e in attribution.prefetches(t, r)] == [
        ("root", "backward", "?")
    ]


# ------------------------------------------------------------------ 3. two roots of one architecture


def _two_roots_step(v: Labels) -> Step:
    """An RL step: the reference model's no-grad forward, then the actor's forward and backward; both
    roots keep the embedding and head, layers.1 has two parameter groups ([pg=2] twice, 2.12+)."""
    s = Step()
    pg = " [pg=2]"
    with s.r("ProfilerStep#1"):
        for model in ("ref", "act"):
            s.mark("FSDP::root_pre_forward")
            with s.r(v.hook("pre_forward", "")):
                s.k(f"{model}_ag_root", "AllGather")
            s.k(f"{model}_embed")
            with s.r(v.hook("pre_forward", "layers.0")):
                s.k(f"{model}_ag_l0", "AllGather")
            s.k(f"{model}_l0")
            s.mark(v.hook("post_forward", "layers.0"))
            for g in "ab":
                with s.r(v.hook("pre_forward", "layers.1") + pg):
                    s.k(f"{model}_ag_l1{g}", "AllGather")
            s.k(f"{model}_l1")
            s.mark(v.hook("post_forward", "layers.1") + pg)
            s.mark(v.hook("post_forward", "layers.1") + pg)
            s.k(f"{model}_head")
            s.mark(v.hook("post_forward", ""))
        s.tid = AUTOGRAD
        s.mark(v.hook("pre_backward", ""))
        s.k("head_bwd")
        s.mark(v.hook("pre_backward", "layers.1") + pg)
        s.mark(v.hook("pre_backward", "layers.1") + pg)
        s.k("l1_bwd")
        v.post_backward(s, "layers.1", "rs_l1")
        s.mark(v.hook("pre_backward", "layers.0"))
        s.k("l0_bwd")
        v.post_backward(s, "layers.0", "rs_l0", rs_wait=True)
        s.k("embed_bwd")
        with s.r("FSDP::root_post_backward_callback"):
            v.post_backward(s, "", "rs_root", rs_wait=True)
        _optimizer(s)
    return s


def _two_roots_expected() -> dict[str, tuple[str, str]]:
    out = {}
    for model, root in (("ref", "root#2"), ("act", "root")):
        prefix = "root#2/" if model == "ref" else ""
        out |= {
            f"{model}_ag_root": (root, "forward"),
            f"{model}_embed": (root, "forward"),
            f"{model}_ag_l0": (f"{prefix}layers.0", "forward"),
            f"{model}_l0": (f"{prefix}layers.0", "forward"),
            f"{model}_ag_l1a": (f"{prefix}layers.1", "forward"),
            f"{model}_ag_l1b": (f"{prefix}layers.1", "forward"),
            f"{model}_l1": (f"{prefix}layers.1", "forward"),
            f"{model}_head": (root, "forward"),
        }
    return out | {
        "head_bwd": ("root", "backward"),
        "l1_bwd": ("layers.1", "backward"),
        "rs_l1": ("layers.1", "backward"),
        "l0_bwd": ("layers.0", "backward"),
        "rs_l0": ("layers.0", "backward"),
        "embed_bwd": ("root", "backward"),
        "rs_root": ("root", "backward"),
        "opt": ("(all)", "optimizer"),
    }


def test_two_roots_with_the_same_fqns_in_one_pass_are_told_apart(tmp_path):
    """torch 2.12–2.14 labels: the reference model's forward is root#2's, the actor's (the root the
    backward follows) keeps the plain names; the output says so."""
    path = _two_roots_step(Labels("2.12")).write(tmp_path / "rank0.json")
    assert placed(path) == _two_roots_expected()
    assert any(
        "2 FSDP2 roots in one forward pass" in n
        for n in unit_ranges.find_ranges(read_kineto(path).table).notes
    )


# ------------------------------------------------------------------ 4. only the blocks sharded


def _per_block_roots_step(v: Labels) -> Step:
    """fully_shard on each block and not on the model: each block is a root of FQN "" (bare labels),
    each queues its own callback (2.13 _fsdp_state.py:466). With 2.12 labels each block has two
    parameter groups: its pre_forward, post_forward, pre_backward and post-backward twice, `` [pg=2]``."""
    s = Step()
    groups = [" [pg=2]", " [pg=2]"] if v.version == "2.12" else [""]
    with s.r("ProfilerStep#1"):
        s.k("embed_fwd")
        for i in (0, 1, 2):
            s.mark("FSDP::root_pre_forward")
            for g, pg in enumerate(groups):
                with s.r(v.hook("pre_forward", "") + pg):
                    s.k(f"ag_b{i}" + "x" * g, "AllGather")
            s.k(f"b{i}_fwd")
            for pg in groups:
                s.mark(v.hook("post_forward", "") + pg)
        s.k("head_fwd")
        s.tid = AUTOGRAD
        s.k("head_bwd")
        for i in (2, 1, 0):
            for g, pg in enumerate(groups):
                with s.r(v.hook("pre_backward", "") + pg):
                    s.k(f"ag_b{i}_b" + "x" * g, "AllGather")
            s.k(f"b{i}_bwd")
            for g, _ in enumerate(groups):
                v.post_backward(s, "", f"rs_b{i}" + "x" * g)
        s.k("embed_bwd")
        for _ in range(3):
            s.mark("FSDP::root_post_backward_callback")
        _optimizer(s)
    return s


PER_BLOCK = {
    "embed_fwd": ("(outside)", "(outside)"),  # no FSDP range around it
    **{f"ag_b{i}": (f"unit#{i + 1}", "forward") for i in range(3)},
    **{f"b{i}_fwd": (f"unit#{i + 1}", "forward") for i in range(3)},
    "head_fwd": ("(outside)", "(outside)"),
    "head_bwd": ("(outside)", "(outside)"),  # before the first backward range
    **{f"ag_b{i}_b": (f"unit#{i + 1}", "backward") for i in range(3)},
    **{f"b{i}_bwd": (f"unit#{i + 1}", "backward") for i in range(3)},
    **{f"rs_b{i}": (f"unit#{i + 1}", "backward") for i in range(3)},
    "embed_bwd": ("root", "backward"),  # between the first backward range and the last callback
    "opt": ("(all)", "optimizer"),
}


@pytest.mark.parametrize("version", ["2.5", "2.12", "2.15"])
def test_blocks_sharded_alone_are_numbered_units_not_all_root(tmp_path, version):
    path = _per_block_roots_step(Labels(version)).write(tmp_path / "rank0.json")
    expected = dict(PER_BLOCK)
    if version == "2.12":  # the second parameter group's all-gathers and reduce-scatters: the same unit's
        for i in range(3):
            unit = f"unit#{i + 1}"
            expected |= {f"ag_b{i}x": (unit, "forward"), f"ag_b{i}_bx": (unit, "backward")}
            expected |= {f"rs_b{i}x": (unit, "backward")}
    assert placed(path) == expected


# ------------------------------------------------------------------ 5. torch_npu's skipped post_forward


def _npu_skip_step(v: Labels) -> Step:
    """torch_npu's fully_shard: an evaluation forward (post_forwards written), then the training forward,
    whose post_forwards return early (the flag set by the first, cleared only in post-backward)."""
    s = Step()
    with s.r("ProfilerStep#1"):
        for model, post in (("e", True), ("t", False)):
            s.mark("FSDP::root_pre_forward")
            with s.r(v.hook("pre_forward", "")):
                s.k(f"{model}_ag_root", "AllGather")
            s.k(f"{model}_embed")
            for i in (0, 1):
                with s.r(v.hook("pre_forward", f"layers.{i}")):
                    s.k(f"{model}_ag_l{i}", "AllGather")
                s.k(f"{model}_l{i}")
                if post:
                    s.mark(v.hook("post_forward", f"layers.{i}"))
            s.k(f"{model}_head")
            if post:
                s.mark(v.hook("post_forward", ""))
        s.tid = AUTOGRAD
        s.mark(v.hook("pre_backward", ""))
        s.k("head_bwd")
        s.mark(v.hook("pre_backward", "layers.1"))
        s.k("l1_bwd")
        v.post_backward(s, "layers.1", "rs_l1")
        s.mark(v.hook("pre_backward", "layers.0"))
        s.k("l0_bwd")
        v.post_backward(s, "layers.0", "rs_l0")
        with s.r("FSDP::root_post_backward_callback"):
            v.post_backward(s, "", "rs_root")
        _optimizer(s)
    return s


NPU_SKIP = {
    "e_ag_root": ("root", "forward"),
    "e_embed": ("root", "forward"),
    "e_ag_l0": ("layers.0", "forward"),
    "e_l0": ("layers.0", "forward"),
    "e_ag_l1": ("layers.1", "forward"),
    "e_l1": ("layers.1", "forward"),
    "e_head": ("root", "forward"),
    "t_ag_root": ("root", "forward"),
    "t_embed": ("root", "forward"),
    "t_ag_l0": ("layers.0", "forward"),
    "t_l0": ("layers.0", "forward"),  # layers.0's window closes at layers.1's pre_forward
    "t_ag_l1": ("layers.1", "forward"),
    "t_l1": ("layers.1", "forward"),
    "t_head": ("layers.1", "forward"),  # the last unit's window runs to the forward's end
    "head_bwd": ("root", "backward"),
    "l1_bwd": ("layers.1", "backward"),
    "rs_l1": ("layers.1", "backward"),
    "l0_bwd": ("layers.0", "backward"),
    "rs_l0": ("layers.0", "backward"),
    "rs_root": ("root", "backward"),
    "opt": ("(all)", "optimizer"),
}


def test_torch_npu_skipped_post_forward_closes_at_the_next_units_pre_forward(tmp_path):
    """torch_npu v26.x-pytorch2.7.1 (2.5–2.11 labels): the training forward's windows close at the next
    unit's pre_forward or the forward's end, the same root as the evaluation forward's (its groups
    skipped: they ran before), and the output says so."""
    path = _npu_skip_step(Labels("2.5")).write(tmp_path / "rank0.json")
    assert placed(path) == NPU_SKIP
    notes = unit_ranges.find_ranges(read_kineto(path).table).notes
    assert any("without FSDP::post_forward" in n for n in notes), notes
    assert not any("roots" in n for n in notes), notes


# ------------------------------------------------------------------ the plain script's real profiles

TITAN_FQNS = ("embed", "blocks.0", "blocks.1", "norm, head")


def _raw_titan_windows(evs: list[dict]) -> dict[tuple[str, str], tuple[int, int]]:
    """The test's own reading of the raw JSON of tests/plain_fsdp2.py's torchtitan step: the reference
    model's forward (first root_pre_forward) and the actor's (second), each unit's window from its
    first pre_forward to its post_forward in that forward, each root's from root_pre_forward to the end
    of the last forward range before the next root or the backward; the actor's backward per unit from
    pre_backward to its last post_backward_*, the root's from the first pre_backward to the callback's end."""
    fsdp = sorted((e for e in evs if e["name"].startswith("FSDP::")), key=lambda e: e["ts"])
    rpf = [raw_ns(e) for e in fsdp if e["name"] == "FSDP::root_pre_forward"]
    first_bwd = min(raw_ns(e)[0] for e in fsdp if e["name"].startswith("FSDP::pre_backward"))
    assert len(rpf) == 2 and rpf[1][0] < first_bwd
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for (start, stop), prefix in (((rpf[0][0], rpf[1][0]), "root#2/"), ((rpf[1][0], first_bwd), "")):
        mine = [e for e in fsdp if start <= raw_ns(e)[0] < stop]
        for fqn in TITAN_FQNS:
            pre = [raw_ns(e) for e in mine if e["name"] == f"FSDP::pre_forward ({fqn})"]
            post = [raw_ns(e) for e in mine if e["name"] == f"FSDP::post_forward ({fqn})"]
            out[(prefix + fqn, "forward")] = (pre[0][0], max(p[1] for p in post))
        ends = [
            raw_ns(e)[1] for e in mine if e["name"].startswith(("FSDP::pre_forward", "FSDP::post_forward"))
        ]
        out[(prefix + "root" if not prefix else "root#2", "forward")] = (start, max(ends))
    for fqn in TITAN_FQNS:
        pre = next(raw_ns(e) for e in fsdp if e["name"] == f"FSDP::pre_backward ({fqn})")
        post = [
            raw_ns(e)[1]
            for e in fsdp
            if e["name"].startswith("FSDP::post_backward_") and e["name"].endswith(f"({fqn})")
        ]
        out[(fqn, "backward")] = (pre[0], max(post))
    callback = next(raw_ns(e) for e in fsdp if e["name"] == "FSDP::root_post_backward_callback")
    out[("root", "backward")] = (first_bwd, callback[1])
    return out


def _inside_only(spans: list[tuple[int, int]], window: tuple[int, int], inner: list[tuple[int, int]]) -> list:
    """The spans starting in ``window`` and in none of the ``inner`` windows."""
    return [(s, e) for s, e in spans if window[0] <= s < window[1] and not any(a <= s < b for a, b in inner)]


def _nested(unit: str, phase: str, windows: dict[tuple[str, str], tuple[int, int]]) -> list[tuple[int, int]]:
    """The windows nested in a root's: its units' of the same phase (none for a unit's)."""
    if unit == "root":
        return [
            w for (u, p), w in windows.items() if p == phase and u != "root" and not u.startswith("root#")
        ]
    if unit == "root#2":
        return [w for (u, p), w in windows.items() if p == phase and u.startswith("root#2/")]
    return []


@pytest.mark.distributed
def test_torchtitan_layout_and_a_second_model_on_real_profiles(plain_fsdp2_profiles):
    """tests/plain_fsdp2.py's torchtitan step, run for real on 2 gloo ranks: a root without parameters
    (embedding, each block and [norm, head] their own units) and a reference model of the same FQNs
    whose no-grad forward comes first. Per rank, every row named as the raw trace says (the reference
    model's root#2/…), each row's compute and collectives those of the raw operators and c10d launches
    inside its window and in no window nested in it (a root's: its units'), and the embedding's
    reduce-scatter (in the callback) the embedding's."""
    folder = plain_fsdp2_profiles / "torchtitan"
    proc = run_cli("analyze", str(folder), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert any("2 FSDP2 roots in one forward pass" in w for w in data["warnings"]), data["warnings"]
    for r in data["ranks"]:
        evs = raw_x_events(folder / f"rank{r['rank']}.pt.trace.json")
        windows = _raw_titan_windows(evs)
        rows = {(u["unit"], u["phase"]): u for u in r["units"]}
        assert set(rows) - {("(all)", "optimizer"), ("(outside)", "(outside)")} == set(windows)
        ops = raw_outermost(raw_training_ops(evs))
        main = next(e["tid"] for e in evs if e["name"].startswith("ProfilerStep#"))
        launches = raw_outermost(
            [raw_ns(e) for e in evs if e["tid"] == main and e["name"].startswith("c10d::")]
        )
        for (unit, phase), window in windows.items():
            inner = _nested(unit, phase, windows)
            mine = _inside_only(ops, window, inner)
            assert round(rows[(unit, phase)]["compute_us"] * 1000) == sum(e - s for s, e in mine), (
                unit,
                phase,
            )
            count = sum(c["count"] for c in rows[(unit, phase)]["collectives"].values())
            assert count == len(_inside_only(launches, window, inner)), (unit, phase)
        assert rows[("embed", "backward")]["collectives"]["reduce_scatter"]["count"] == 1
        assert "reduce_scatter" not in rows[("root", "backward")]["collectives"]


# ------------------------------------------------------------------ analyze --explain UNIT


def test_explain_lists_each_window_with_the_ranges_that_opened_and_closed_it(tmp_path):
    """The torchtitan step (2.5 labels): the embedding's forward window runs from its pre_forward
    (3 µs after the step's start, by the Step clock) to its post_forward's end (9 µs), holding its
    all-gather and its compute; its backward closes with the reduce inside the callback; on the CLI,
    an unknown unit names the units there are."""
    from fsdpbench.analysis import analyze
    from fsdpbench.report.terminal.units import explain_rows

    path = _torchtitan_step(Labels("2.5")).write(tmp_path / "rank0.json")
    rows = explain_rows(analyze([path], workers=1), "tok_embeddings")
    assert [(r["phase"], r["opened_by"], r["closed_by"], r["events"]) for r in rows] == [
        ("forward", "FSDP::pre_forward (tok_embeddings)", "FSDP::post_forward (tok_embeddings)", 2),
        ("backward", "FSDP::pre_backward (tok_embeddings)", "FSDP::post_backward_reduce (tok_embeddings)", 2),
    ]
    assert (rows[0]["start_ms"], rows[0]["end_ms"]) == (0.003, 0.009)
    proc = run_cli("analyze", str(path), "--explain", "root", env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    assert "Windows of unit 'root'" in proc.stdout
    assert "FSDP::root_pre_forward" in proc.stdout and "FSDP::root_post_backward_callback" in proc.stdout
    proc = run_cli("analyze", str(path), "--explain", "nope", env={"COLUMNS": "250"})
    assert "no window of unit 'nope' on rank 0 (its units: root, tok_embeddings, layers.0" in proc.stdout


def test_explain_says_a_window_closed_without_its_post_forward(tmp_path):
    from fsdpbench.analysis import analyze
    from fsdpbench.report.terminal.units import explain_rows

    path = _npu_skip_step(Labels("2.5")).write(tmp_path / "rank0.json")
    rows = explain_rows(analyze([path], workers=1), "layers.0")
    assert [(r["phase"], r["closed_by"]) for r in rows] == [
        ("forward", "FSDP::post_forward (layers.0)"),
        ("forward", "no post_forward: the next unit's FSDP::pre_forward (layers.1)"),
        ("backward", "FSDP::post_backward_reduce (layers.0)"),
    ]


def test_torch_2_15_finalize_backward_ends_the_roots_backward_like_the_callback():
    """torch 2.15's ``FSDP::finalize_backward`` (``_fsdp_state.py:466``), called alone by the manual
    finalization API with a unit's pending post-backward inside it: the unit's backward window runs to
    its reduce's end, the root's (no parameters of its own) from the first backward range to the
    finalization's end. Times in ns, written by hand."""
    from fsdpbench.analysis.rank import fsdp2_windows as fw

    def hook(kind: str, fqn: str | None, start: int, end: int) -> fw.Hook:
        return fw.Hook(kind, fqn, 0, start, end, f"FSDP::{kind}")

    built = fw.windows(
        [
            hook("root_pre_forward", None, 0, 1),
            hook("pre_forward", "a", 2, 3),
            hook("post_forward", "a", 5, 6),
            hook("pre_backward", "a", 10, 11),
            hook("finalize_backward", None, 20, 30),
            hook("post_backward_reshard", "a", 21, 22),
            hook("post_backward_reduce", "a", 22, 29),
        ],
        [],
        {},
    )
    assert sorted((w.unit, w.phase, w.start, w.end) for w in built.windows) == [
        ("a", "backward", 10, 29),
        ("a", "forward", 2, 6),
        ("root", "backward", 10, 30),
        ("root", "forward", 0, 6),
    ]
