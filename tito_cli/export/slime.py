"""``--to slime``: rollout dumps that slime trains on with ``--load-debug-rollout-data PATH``.

One dump is ``torch.save({"rollout_id": k, "samples": [dict, ...]})``, the
payload slime's ``--save-debug-rollout-data`` writes: each dict has the
fields of slime's ``Sample`` (``slime/utils/types.py``), ``status`` as its
value string and ``metadata`` as a dict, so that ``Sample.from_dict``
rebuilds every record.  slime loads ``PATH.format(rollout_id=k)`` for
training step ``k``; ``--split-by N`` writes one dump per N groups, named by
the ``{rollout_id}`` pattern in ``--out``.

slime reads the samples as one flat list and, for GRPO-style reward
normalization, cuts the rewards into consecutive groups of
``n_samples_per_prompt``.  So the samples of a group are written together
(groups in ``group_index`` order, a group's sessions in session-id order, a
session's samples in emission order), a group is never split across dumps,
and a session that forked into several samples is handled as ``forked``
says (docs/export.md).  Sessions without a ``group_index`` are groups of
one, after the others; with ``--split-by`` (whole GRPO groups per dump) they
are refused.

The sessions' tables are parked in an anonymous spill file as they arrive
and read back one dump at a time: memory holds one dump's samples, which
is what ``torch.save`` needs anyway.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import pyarrow as pa

from .._atomic import StagedFile
from ..errors import ExportError, OutputError, write_error
from .base import Sink, SinkContext
from .groups import GroupCounts

__all__ = ["RolloutDump", "SlimeOptions", "rollout_id_of"]

PATTERN = "{rollout_id}"

#: What ``--to slime`` does with a session that forked into several samples (docs/export.md).
ForkedChoice = Literal["keep", "leaf", "regroup"]
#: What ``--to slime`` does with rollout logprobs (slime uses them for all samples or none).
LogprobsChoice = Literal["auto", "keep", "drop"]


@dataclass(frozen=True, slots=True)
class SlimeOptions:
    """``--to slime``'s options (docs/export.md)."""

    split_by: int | None = field(
        default=None,
        metadata={
            "help": "one rollout dump per N groups (a group is never split), named by the {rollout_id} "
            "pattern in --out (0, 1, …), as slime's --load-debug-rollout-data formats it."
        },
    )
    forked: ForkedChoice = field(
        default="keep",
        metadata={
            "help": "a session that forked into several samples: 'keep' them all and warn that "
            "n_samples_per_prompt no longer holds for its group; 'leaf' keeps only the sample that ends the "
            "session (with the session's whole reward); 'regroup' keeps all and records each sample's group "
            "in metadata['tito']['group'] for a custom reward post-process."
        },
    )
    logprobs: LogprobsChoice = field(
        default="auto",
        metadata={
            "help": "rollout logprobs (used for every sample or none): 'auto' writes them when every sample "
            "has them, none when none has, and stops when only some have; 'keep' writes them as they are "
            "(0.0 where none were recorded); 'drop' writes none."
        },
    )

    @property
    def out_pattern(self) -> str | None:
        """The placeholder ``--out`` holds, one file per value (``--split-by``), if any."""
        return PATTERN if self.split_by is not None else None


def rollout_id_of(table: pa.Table) -> list[int | None]:
    """Each row's ``rollout_id`` (SPEC §8.8): the samples column when present and not null, else ``index``."""
    index: list[int | None] = table.column("index").to_pylist()
    if "rollout_id" not in table.column_names:
        return index
    return [i if r is None else r for r, i in zip(table.column("rollout_id").to_pylist(), index, strict=True)]


@dataclass(slots=True)
class _Parked:
    session_id: str
    group_index: int | None
    offset: int
    size: int


class _ParkedSessions:
    """The sessions parked in the spill file, as columns: a session costs its id and three numbers."""

    def __init__(self) -> None:
        self.session_ids: list[str] = []
        self.group_indexes = array("q")
        self.grouped = bytearray()  # 1 where the session has a group_index
        self.offsets = array("q")
        self.sizes = array("q")

    def append(self, session_id: str, group_index: int | None, offset: int, size: int) -> None:
        self.session_ids.append(session_id)
        self.group_indexes.append(0 if group_index is None else group_index)
        self.grouped.append(group_index is not None)
        self.offsets.append(offset)
        self.sizes.append(size)

    def __len__(self) -> int:
        return len(self.session_ids)

    def __getitem__(self, k: int) -> _Parked:
        group_index = self.group_indexes[k] if self.grouped[k] else None
        return _Parked(self.session_ids[k], group_index, self.offsets[k], self.sizes[k])


class RolloutDump(Sink):
    """Writes slime rollout dumps (see the module's docstring)."""

    name = "slime"
    summary = "slime rollout dumps (torch) for --load-debug-rollout-data, groups kept together"
    Options = SlimeOptions

    def __init__(self, out: Path, context: SinkContext) -> None:
        super().__init__(out, context)
        try:
            import torch  # noqa: F401 - checked now, before any rebuilding
        except ImportError:
            raise ExportError(
                "--to slime writes torch files, and torch is not installed",
                tip="pip install 'tito-cli[slime]'  (without a GPU: pip install torch --index-url "
                "https://download.pytorch.org/whl/cpu first, a CPU build)",
            ) from None
        options: SlimeOptions = context.options or SlimeOptions()
        self.options = options
        if options.split_by is not None:
            if options.split_by < 1:
                raise ExportError(f"--split-by must be at least 1, got {options.split_by}")
            if PATTERN not in out.name:
                raise ExportError(
                    "--split-by writes one file per N groups: --out must name them with {rollout_id}",
                    file=out,
                    tip="e.g. --out 'rollout_{rollout_id}.pt', and give slime the same pattern",
                )
        else:
            self.check_target(self.path_of(0))
        if not out.parent.is_dir():
            raise OutputError("the output's folder does not exist", file=out)
        self.groups = GroupCounts()
        self._parked = _ParkedSessions()
        self._spill: IO[bytes] | None = None
        self._staged: list[StagedFile] = []
        #: Samples with trained tokens whose rollout logprobs are all 0.0 (none recorded), the session of
        #: the first of them, and the samples that have them.
        self._without_logprobs = 0
        self._first_without_logprobs: str | None = None
        self._with_logprobs = 0

    def path_of(self, rollout_id: int) -> Path:
        return self.out.with_name(self.out.name.replace(PATTERN, str(rollout_id)))

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        sid = table.column("session_id")[0].as_py()
        group_index = table.column("group_index")[0].as_py()
        if group_index is None and self.options.split_by is not None:
            # A group of one, alone in a dump of its own or beside other such: GRPO's per-group reward
            # normalization has nothing to compare it with (slime's gives NaN for a lone sample).
            raise ExportError(
                f"session {sid!r} has no group_index: --split-by writes whole GRPO groups, and it belongs to none",
                tip="rebuild with --unfinished reject (a session without a sessions row has no group_index), "
                "or give every session a group_index in its sessions row",
            )
        self.groups.add(sid, group_index, table.num_rows)
        self._note_logprobs(sid, table)
        if self._spill is None:
            # Anonymous (unlinked at once): nothing is left behind, whatever happens.
            self._spill = tempfile.TemporaryFile(prefix=".tito-spill-", dir=self.out.parent)  # noqa: SIM115
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
        data = sink.getvalue()
        offset = self._spill.seek(0, os.SEEK_END)
        self._spill.write(data)
        self._parked.append(sid, group_index, offset, data.size)

    def _note_logprobs(self, sid: str, table: pa.Table) -> None:
        masks = table.column("loss_mask").to_pylist()
        logprobs = table.column("rollout_log_probs").to_pylist()
        for mask, values in zip(masks, logprobs, strict=True):
            trained = np.asarray(mask, dtype=bool)
            if not trained.any():
                continue
            if np.any(np.asarray(values, dtype=np.float32)[trained] != 0.0):
                self._with_logprobs += 1
            else:
                self._without_logprobs += 1
                if self._first_without_logprobs is None:
                    self._first_without_logprobs = sid

    def _keep_logprobs(self) -> bool:
        choice = self.options.logprobs
        if choice != "auto":
            return choice == "keep"
        if self._without_logprobs and self._with_logprobs:
            raise ExportError(
                f"{self._without_logprobs} samples have no rollout logprobs (all 0.0 on their trained "
                f"tokens, e.g. session {self._first_without_logprobs!r}) while {self._with_logprobs} have them; "
                "slime uses rollout logprobs for every sample or for none",
                tip="--logprobs drop (slime recomputes them) or --logprobs keep (write the 0.0s as they are)",
            )
        return not self._without_logprobs

    def close(self) -> list[StagedFile]:
        keep_logprobs = self._keep_logprobs()
        groups = self._grouped()
        per_file = self.options.split_by or max(len(groups), 1)
        chunks = [groups[i : i + per_file] for i in range(0, len(groups), per_file)] or [[]]
        forked = self.options.forked
        for rollout_id, chunk in enumerate(chunks):
            path = self.path_of(rollout_id)
            self.check_target(path)
            samples: list[dict[str, Any]] = []
            for group in chunk:
                tables = [self._unpark(p) for p in group]
                samples.extend(self._group_samples(tables, keep_logprobs))
            staged = StagedFile(path)
            self._staged.append(staged)
            self._save({"rollout_id": rollout_id, "samples": samples}, staged.path)
            self.samples_written += len(samples)
            self.files.append(path)
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        bad = self.groups.mismatched()
        if bad and forked == "keep":
            self.warnings.append(
                f"{len(bad)} groups have more or fewer samples than sessions: slime's n_samples_per_prompt "
                "no longer holds for them (--forked leaf keeps one sample a session; --forked regroup "
                "marks each sample's group for a reward post-process)"
            )
            self.warnings.extend(self.groups.warnings())
        elif (size := self.groups.size_warning()) is not None:
            # One sample a session, but not one n_samples_per_prompt for every group.
            self.warnings.append(size)
        return list(self._staged)

    def abort(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        for staged in self._staged:
            staged.discard()

    def _grouped(self) -> list[list[_Parked]]:
        """The parked sessions cut into groups, in the order they are written."""
        by_group: dict[int, list[_Parked]] = {}
        alone: list[list[_Parked]] = []
        for k in range(len(self._parked)):
            parked = self._parked[k]
            if parked.group_index is None:
                alone.append([parked])
            else:
                by_group.setdefault(parked.group_index, []).append(parked)
        ordered = [sorted(by_group[g], key=lambda p: p.session_id) for g in sorted(by_group)]
        return ordered + sorted(alone, key=lambda group: group[0].session_id)

    def _unpark(self, parked: _Parked) -> pa.Table:
        assert self._spill is not None
        self._spill.seek(parked.offset)
        return pa.ipc.open_stream(pa.py_buffer(self._spill.read(parked.size))).read_all()

    def _group_samples(self, tables: list[pa.Table], keep_logprobs: bool) -> list[dict[str, Any]]:
        forked = self.options.forked
        sessions = [_session_samples(t, keep_logprobs) for t in tables]
        if forked == "leaf":
            split = self.context.policy.reward_mode == "split"
            sessions = [[_ending_sample(samples, split)] for samples in sessions]
        elif forked == "regroup":
            for samples in sessions:
                for sample in samples:
                    sample["metadata"].setdefault("tito", {})["group"] = {
                        "group_index": sample["group_index"],
                        "sessions": len(sessions),
                        "session_samples": len(samples),
                    }
        return [sample for samples in sessions for sample in samples]

    @staticmethod
    def _save(payload: dict[str, Any], path: Path) -> None:
        import torch

        try:
            # Through a file object: given a path, torch names the archive's records after the file
            # (here a random temporary name), so the same samples would not give the same bytes.
            with path.open("wb") as file:
                recording = _WriteErrors(file)
                torch.save(payload, recording)  # type: ignore[arg-type, unused-ignore]  # a binary file; Any without torch
        except OSError as exc:
            raise write_error(exc, path) from None
        except RuntimeError:
            # torch's archive writer reports a failed write (a full disk, EFBIG) as a RuntimeError.
            if recording.error is not None:
                raise write_error(recording.error, path) from None
            raise


class _WriteErrors:
    """A binary file that remembers the ``OSError`` a write raised (torch turns it into a ``RuntimeError``)."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.file.flush()


def _session_samples(table: pa.Table, keep_logprobs: bool) -> list[dict[str, Any]]:
    """One session's rows as slime ``Sample.to_dict()`` records."""
    columns = table.to_pydict()
    rollout_ids = rollout_id_of(table)
    experts = _routed_experts(table)
    samples = []
    for i in range(table.num_rows):
        meta = json.loads(columns["metadata"][i])
        samples.append(
            {
                "group_index": columns["group_index"][i],
                "index": columns["index"][i],
                "rollout_id": rollout_ids[i],
                # tito rebuilds token ids; the text is not part of a samples file.
                "prompt": "",
                "tokens": columns["tokens"][i],
                "multimodal_inputs": None,
                "multimodal_train_inputs": None,
                "response": "",
                "response_length": columns["response_length"][i],
                "label": columns["label"][i],
                "reward": columns["reward"][i],
                "loss_mask": columns["loss_mask"][i],
                # One per trained turn that recorded one, the version at the end of its call (slime's shape).
                "weight_versions": list(meta.get("tito", {}).get("weight_versions", [])),
                "rollout_log_probs": columns["rollout_log_probs"][i] if keep_logprobs else None,
                "rollout_routed_experts": None if experts is None else experts[i],
                "remove_sample": False,
                "teacher_log_probs": None,
                "status": columns["status"][i],
                "metadata": meta,
                "generate_function_path": None,
                "train_metadata": None,
                "session_id": columns["session_id"][i],
                "non_generation_time": 0.0,
                "spec_info": {
                    "spec_accept_token_num": 0,
                    "spec_draft_token_num": 0,
                    "spec_verify_ct": 0,
                    "completion_token_num": 0,
                },
                "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 0},
            }
        )
    return samples


def _routed_experts(table: pa.Table) -> list[Any] | None:
    """Each sample's routed experts as a torch int32 tensor ``[len(tokens) - 1, layers, topk]``, what slime's
    ``Sample.rollout_routed_experts`` holds after its rollout (``None`` without ``rebuild --routed-experts``)."""
    if "routed_experts" not in table.column_names:
        return None
    import torch

    shapes = table.column("routed_experts_shape").to_pylist()
    flat = table.column("routed_experts").to_pylist()
    return [
        torch.from_numpy(np.asarray(values, dtype=np.int32).reshape(shape))
        for values, shape in zip(flat, shapes, strict=True)
    ]


def _ending_sample(samples: list[dict[str, Any]], split_reward: bool) -> dict[str, Any]:
    """The sample that holds the session's last turn (the leaf that ends it), with the session's whole reward."""
    last_seq = max(max(s["metadata"].get("tito", {}).get("turns") or [-1]) for s in samples)
    ending = [s for s in samples if last_seq in (s["metadata"].get("tito", {}).get("turns") or [])]
    chosen = dict(ending[-1] if ending else samples[-1])
    if split_reward:
        # Under --reward-mode split each sample got reward / samples: the one kept gets it all back.
        chosen["reward"] = math.fsum(s["reward"] for s in samples)
    return chosen
