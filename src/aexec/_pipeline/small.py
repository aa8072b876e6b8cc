"""Which of a run's bounded steps are done on the loop's thread (issue 42).

Preparing, collecting and removing a run's scratch root are blocking work, done in a
worker thread. For a small Python job without a repo each is a bounded fraction of a
millisecond (a tmpfs mount and a few small files; a walk of a near-empty root; a detach
and an ``rmdir``), about what a worker-thread hop costs the loop in waking threads, so
such a job's are done on the loop's thread. What the inputs or the candidate size (a
repo, large inputs, much output, many files, files asked back) stays in a thread.
"""

from __future__ import annotations

import os

from .._boundary.scratch import remove_scratch
from .._raw import RawRun
from .._stages.plan import Scratch
from .session import Job

#: `small_job`'s code, stdin and files (as sent); `small_result`'s output; and the inodes
#: a small root's file system holds (a snippet's fresh root holds six).
SMALL_INPUT_BYTES, SMALL_OUTPUT_BYTES, SMALL_TREE_INODES = 256 * 1024, 64 * 1024, 64


def small_job(job: Job) -> bool:
    """Prepared on the loop: a Python job without a repo (nothing to copy, patch or
    compile) whose inputs are at most `SMALL_INPUT_BYTES`."""
    c = job.candidate
    if c.repo is not None or job.lang is not None:
        return False
    return len(c.code or "") + len(c.stdin or "") + sum(len(d) for _, d in c.files or ()) <= SMALL_INPUT_BYTES


def small_result(job: Job, root: str, raw: RawRun) -> bool:
    """Collected on the loop too: a `small_job` whose run printed at most
    `SMALL_OUTPUT_BYTES`, asked for no files back and left a small tree at ``root``."""
    if job.candidate.fetch_files or len(raw.stdout) + len(raw.stderr) > SMALL_OUTPUT_BYTES:
        return False
    return small_tree(root)


def small_tree(root: str) -> bool:
    """At most `SMALL_TREE_INODES` inodes in the file system at ``root`` (one ``statvfs``:
    a run's own tmpfs; a plain directory, without one, counts its whole file system's)."""
    try:
        fs = os.statvfs(root)
    except OSError:
        return False
    return fs.f_files - fs.f_ffree <= SMALL_TREE_INODES


def remove_small(scratches: list[Scratch]) -> None:
    """Remove here the roots in ``scratches`` that are a `small_tree`; the others are
    left in the list, for a worker thread."""
    left = []
    for scratch in scratches:
        if small_tree(scratch.root):
            remove_scratch(scratch)
        else:
            left.append(scratch)
    scratches[:] = left
