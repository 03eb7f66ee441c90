"""The two-aggregator mode (Prio3, DAP-like): tasks, uploads, aggregation jobs and collection; no HTTP.

Two aggregators, the **leader** and the **helper**, each with its own database, hold the same Prio3 task
(the VDAF variant and its parameters, the application context, and a ``verify_key`` that the two share and
nobody else knows). A device shards its measurement (:meth:`fedstats.vdaf.Prio3.shard`) and uploads the
leader's input share to the leader, then the helper's to the helper with the leader's **receipt** of the
report (:func:`upload_receipt`), each in a signed request; either share alone is uniformly random. The
leader drives aggregation in **jobs** of up to ``batch_size`` reports
(:func:`run_leader_jobs`):

1. it claims pending reports (a job row, so that a crash or a second leader process never takes a report
   twice) and runs ``verify_init`` on the whole batch (:meth:`~fedstats.vdaf.Prio3.verify_init_batch`);
2. it sends the helper the job: report ids (the Prio3 nonces), public shares and its verifier shares;
3. the helper (:func:`helper_job`) looks its input shares up, runs ``verify_init`` on the batch, combines
   both verifier shares into the verifier messages, runs ``verify_next``, adds the output shares of the
   valid reports to its aggregate share, records every report's fate, and answers with its own verifier
   shares (or the reason it has none: ``missing_at_helper``, ``replayed``); the answer is stored with the
   job, so a retried job gets the same answer and adds nothing twice;
4. the leader combines the same verifier shares, decides the same way and adds its output shares.

A rejected report is counted with its reason (``invalid_proof``, ``missing_at_helper``, ``replayed``).
Collection (:func:`collect`) freezes the task (no more uploads or jobs), adds this aggregator's share of
DP noise (drawn once; a repeated collection returns the same answer) and returns its aggregate share with
the counts; the collector combines the two answers (:func:`fedstats.client.vdaf.unshard`). Neither
aggregator releases anything while it holds a report that was never in an aggregation job
(:class:`UnaggregatedError`): the helper holds only reports the leader acknowledged, so a leader cannot
leave one out of its jobs unnoticed. Trust (``docs/vdaf.md``, "Trust model"): the helper never sees a
leader's input share nor the leader a helper's, so a report stays secret unless the two collude, within a
batch of at least ``min_batch_size`` reports (an aggregator that enrolls ``min_batch_size - 1`` devices of
its own can still isolate one report); each aggregator's noise alone makes the release DP. Robustness
(an invalid report is rejected, the sum is exact) holds only with both aggregators honest.

The code is split by concern: tasks and signed tasks (:mod:`~fedstats.service.domain.vdaf_tasks`), uploads
(:mod:`~fedstats.service.domain.vdaf_upload`), aggregation jobs (:mod:`~fedstats.service.domain.vdaf_jobs`)
and collection (:mod:`~fedstats.service.domain.vdaf_collect`); this module re-exports their public names.
"""

from __future__ import annotations

from fedstats.service.domain.vdaf_collect import (
    UnaggregatedError,
    aggregate_and_collect,
    aggregate_pending,
    collect,
)
from fedstats.service.domain.vdaf_jobs import _claim as _claim  # tests play a crashed leader
from fedstats.service.domain.vdaf_jobs import _leader_job as _leader_job
from fedstats.service.domain.vdaf_jobs import helper_job, run_leader_jobs
from fedstats.service.domain.vdaf_tasks import (
    REASONS,
    Noise,
    abandon_signed,
    charge_id,
    check_peer_token,
    create_signed,
    create_task,
    join_signed,
    open_round,
    signed_info,
    task_info,
    task_row,
    vdaf_from_spec,
)
from fedstats.service.domain.vdaf_upload import Uploaded, upload_receipt, upload_report

__all__ = [
    "REASONS",
    "Noise",
    "UnaggregatedError",
    "Uploaded",
    "abandon_signed",
    "aggregate_and_collect",
    "aggregate_pending",
    "charge_id",
    "check_peer_token",
    "collect",
    "create_signed",
    "create_task",
    "helper_job",
    "join_signed",
    "open_round",
    "run_leader_jobs",
    "signed_info",
    "task_info",
    "task_row",
    "upload_receipt",
    "upload_report",
    "vdaf_from_spec",
]
