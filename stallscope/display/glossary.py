"""The glossary every view links to: the report's and the dashboard's glossary, and docs/glossary.md
(``markdown()`` writes it; a test checks the file matches). A term's anchor is ``term-<slug>``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    slug: str
    term: str
    meaning: str

    @property
    def anchor(self) -> str:
        return f"term-{self.slug}"


TERMS: tuple[Term, ...] = (
    Term(
        "window",
        "window",
        "The time analysed: from the first to the last profiled step (ProfilerStep#N), or the whole trace "
        "when it has no steps. Every share is of the window.",
    ),
    Term(
        "critical-path",
        "critical path",
        "The chain of work that set the end time: walking back from the window's end, at each point the "
        "work that finished last. Its segments say whether host work, data loading, device work, launch "
        "latency, sync waits or idle waiting decided the wall time.",
    ),
    Term(
        "bottleneck",
        "bottleneck",
        "The kind of work whose 2× speed-up the what-if replay says would save the most time; "
        "'balanced' when host and device are both near saturation.",
    ),
    Term(
        "idle-gap",
        "idle gap",
        "A stretch of at least the minimum gap (20 µs by default) in which the device ran nothing. Each "
        "gap has one cause, judged from the host thread that issued the work ending it: sync, input, "
        "launch, dependency, host or unknown.",
    ),
    Term(
        "sync",
        "sync",
        "A host call that blocks until device work completes (cudaDeviceSynchronize, .item(), a copy to "
        "the host...). 'Host wait' is the time the host was blocked; 'device idle after' is the idle time "
        "charged to it, because the host lost its lead over the device.",
    ),
    Term(
        "avoidable",
        "avoidable sync",
        "A sync the program did not need (a false sync), with the reason: blanket, repeated, redundant, "
        "logging, pageable copy or data-dependent shape.",
    ),
    Term(
        "blanket",
        "blanket sync",
        "A device-wide synchronize (torch.cuda.synchronize()) where a narrower wait, or none, would do.",
    ),
    Term(
        "launch-bound",
        "launch-bound",
        "The host spends so long launching many tiny kernels that the device waits for the next one: "
        "launch latency, not computation, sets the pace.",
    ),
    Term(
        "what-if",
        "what-if scenarios",
        "The dependency graph re-timed with changed costs (no avoidable syncs, no syncs, device or host "
        "2× faster, data loading overlapped). A replay of the unchanged graph reproduces the recorded "
        "time; each scenario's saving is against it.",
    ),
    Term(
        "pipeline",
        "pipeline model",
        "An idealised two-stage model: host prep P and device compute G per step, n steps; serial "
        "n(P+G), pipelined P+G+(n−1)·max(P,G). It says which stage is slower; within a step it takes "
        "the stages to run one after the other, so a run that already overlaps them can be faster than "
        "its 'pipelined' time.",
    ),
    Term(
        "straggler",
        "straggler",
        "In a multi-rank job, the rank that reached a collective last: every other rank waited for it. "
        "Its lateness is the time it arrived after the first rank.",
    ),
    Term(
        "skew",
        "skew",
        "For one collective call, the last rank's arrival minus the first rank's.",
    ),
    Term(
        "no-stragglers",
        "without stragglers",
        "The job's what-if: every collective starts at the ranks' median arrival, so nobody waits for a "
        "late rank. Its saving is the time the stragglers cost the job.",
    ),
)

BY_SLUG = {t.slug: t for t in TERMS}


def markdown() -> str:
    """docs/glossary.md's text."""
    lines = [
        "# Glossary",
        "",
        "The terms the terminal, the HTML report and the dashboard use; the report and the dashboard link",
        "each term to its entry. Generated from `stallscope/display/glossary.py` (a test checks they match).",
        "",
    ]
    for t in TERMS:
        lines += [f'<a id="{t.anchor}"></a>', f"**{t.term}**: {t.meaning}", ""]
    return "\n".join(lines)
