"""The job section of ``stallscope analyze`` on a multi-rank job: who made whom wait, and why."""

from __future__ import annotations

from stallscope.analyzer.job.result import JobAnalysis
from stallscope.analyzer.job.stragglers import MIN_LATE_US
from stallscope.display.text import prose_units
from stallscope.display.units import duration as ms
from stallscope.display.units import saving

TOP_RANKS = 5
MAX_STEPS = 6  # job steps listed (the slowest when there are more)


def render_job_headline(j: JobAnalysis) -> str:
    """The job's answer, printed before the shown rank's analysis: who held the job back and what that
    cost (the report's and the dashboard's job verdict)."""
    n = len(j.ranks)
    late = max(j.rank_stats, key=lambda s: (s.late_us, -s.rank), default=None)
    line = f"  job       {n} ranks, job wall {ms(j.wall_us)}"
    if late is not None and late.times_last:
        line += f"; rank {late.rank} held the job back ({late.times_last}x last, {ms(late.late_us)} late)"
    for w in j.whatif:
        pct = w.saving_us / j.wall_us if j.wall_us > 0 else 0.0
        line += f"; without stragglers it {saving(w.saving_us)} ({pct:.0%})"
    return line + "\n            (the job in detail after the shown rank's analysis)"


def render_job(j: JobAnalysis, top: int = 3) -> str:
    n = len(j.ranks)
    lines = [
        f"  job       {n} ranks, wall {ms(j.wall_us)}; {len(j.instances)} collectives matched across ranks"
    ]
    if j.instances:
        share = j.collective_wait_us / (j.wall_us * n) if j.wall_us > 0 and n else 0.0
        lines.append(
            f"            ranks waited {ms(j.collective_wait_us)} in collectives in all ({share:.0%} of rank time)"
        )
        worst = j.worst(1)[0]
        if worst.late_us >= MIN_LATE_US:
            lines.append(f"            worst: {prose_units(worst.sentence)}")
    for i, f in enumerate(j.findings[:top], 1):
        label = "  straggle" if i == 1 else "          "
        lines.append(f"{label}{i:>2}. [{f.severity.value}] {prose_units(f.title)}")
        lines.append(f"              fix: {f.advice}")
    late = [s for s in j.rank_stats if s.times_last]
    if late:
        parts = ", ".join(f"rank {s.rank} {s.times_last}x {ms(s.late_us)}" for s in late[:TOP_RANKS])
        lines.append(f"  last in   {parts}")
    for w in j.whatif:
        pct = w.saving_us / j.wall_us if j.wall_us > 0 else 0.0
        lines.append(
            f"  job what-if {w.scenario}: {ms(w.predicted_wall_us)}, {saving(w.saving_us)} ({pct:.0%})"
        )
    shown = sorted(j.steps, key=lambda s: -s.wall_us)[:MAX_STEPS] if len(j.steps) > MAX_STEPS else j.steps
    if len(shown) < len(j.steps):
        walls = sorted(s.wall_us for s in j.steps)
        lines.append(
            f"  job steps {len(walls)}: median wall {ms(walls[len(walls) // 2])}, max {ms(walls[-1])}; the slowest:"
        )
    for s in shown:
        lines.append(f"  job step  {s.name:<20} wall {ms(s.wall_us)} over {s.ranks} ranks")
    overlap = ", ".join(
        f"{s.rank}: {s.overlap.overlapped_us / s.overlap.comm_us:.0%}"
        for s in sorted(j.rank_stats, key=lambda s: s.rank)
        if s.overlap.comm_us > 0
    )
    if overlap:
        lines.append(f"  overlap   communication hidden behind computation, by rank  {overlap}")
    if j.offsets_us and j.instances:
        spread = max(j.offsets_us.values()) - min(j.offsets_us.values())
        lines.append(
            f"  clocks    rank offsets span {ms(spread)} (aligned on collective ends); after aligning, "
            f"collective ends still differ by {ms(j.residual_p50_us)} typically, {ms(j.residual_max_us)} "
            "at most: lateness below that is noise"
        )
    for failure in j.failures:
        lines.append(f"  failed    {failure.error}")
    for note in j.notes:
        lines.append(f"  note      {note}")
    return "\n".join(lines)


def with_job(text: str, j: JobAnalysis | None, top: int = 3) -> str:
    """A rank's summary ``text`` as ``analyze`` prints it for a job: the job's answer after its first
    line, the job in detail after the rank's analysis; ``text`` alone without a job."""
    if j is None:
        return text
    head, _, rest = text.partition("\n")
    return f"{head}\n{render_job_headline(j)}\n{rest}\n{render_job(j, top)}"
