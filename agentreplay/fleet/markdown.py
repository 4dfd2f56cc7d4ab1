"""The task report as rows for the CLI tables and as a Markdown page (same rows, one place)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentreplay.fleet.report import TaskReport

#: At most this many collapsed programs are listed in the Markdown page (all are in collapsed_programs.parquet).
MD_COLLAPSED_ROWS = 30


def _f(x: Any, fmt: str = ",.3f") -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return format(x, fmt)


def cost_rows(rep: TaskReport) -> tuple[list[str], list[list[str]]]:
    c = rep.summary["cost"]
    be = c["break_even"]
    p = rep.programs

    def q(col: str) -> list[str]:
        return [_f(float(p[col].quantile(0.5)), ",.3f"), _f(float(p[col].quantile(0.9)), ",.3f")]

    rows = [
        ["no prompt caching", _f(c["usd_per_1000_tasks"]["nocache"], ",.2f"), *q("nocache_usd"), "-", "-"],
        [
            "5-minute TTL",
            _f(c["usd_per_1000_tasks"]["5m"], ",.2f"),
            *q("cost_5m_usd"),
            f"{be['gaps_over_5m']:,}",
            f"{(p['cheaper_tier'] == '5m').sum():,}",
        ],
        [
            "1-hour TTL",
            _f(c["usd_per_1000_tasks"]["1h"], ",.2f"),
            *q("cost_1h_usd"),
            f"{be['gaps_over_1h']:,}",
            f"{(p['cheaper_tier'] == '1h').sum():,}",
        ],
    ]
    return [
        "tier",
        "USD per 1,000 tasks",
        "USD per task p50",
        "p90",
        "gaps past TTL",
        "programs cheaper in this tier",
    ], rows


def gpu_rows(rep: TaskReport) -> tuple[list[str], list[list[str]]]:
    g = rep.summary["gpu_time"]
    rows = [
        ["GPUs / makespan (s)", f"{g['gpus']:,} / {_f(g['makespan_s'], ',.1f')}"],
        ["GPU-hours per 1,000 tasks (GPUs x makespan)", _f(g["fleet_gpu_hours_per_1000_tasks"], ",.2f")],
        ["busy GPU-hours per 1,000 tasks (engine busy time)", _f(g["busy_gpu_hours_per_1000_tasks"], ",.2f")],
        ["busy share of GPU time", _f(g["busy_share"], ".3f")],
        [
            "attributed GPU-hours per 1,000 tasks (programs' token shares)",
            _f(g.get("attributed_gpu_hours_per_1000_tasks"), ",.2f"),
        ],
        ["idle GPU-hours per 1,000 tasks (fleet - attributed)", _f(g.get("idle_gpu_hours_per_1000_tasks"), ",.2f")],
    ]
    return ["self-hosted GPU time", "value"], rows


def gpu_program_rows(rep: TaskReport) -> tuple[list[str], list[list[str]]]:
    """GPU-seconds per program: quantiles, then the top programs."""
    g = rep.summary.get("gpu_s_per_program") or {}
    if not g:
        return ["GPU-seconds per program", "value"], [["(output without programs.gpu_s)", "-"]]
    rows = [[q, _f(g[q], ",.1f"), "", ""] for q in ("p50", "p90", "p99", "mean")]
    rows += [
        [f"top {i + 1}: {t['program_id']}", _f(t["gpu_s"], ",.1f"), f"{t['n_turns']:,}", _f(t["jct_s"], ",.0f")]
        for i, t in enumerate(g["top"])
    ]
    return ["GPU-seconds per program", "GPU-s", "turns", "JCT (s)"], rows


def break_even_rows(rep: TaskReport) -> tuple[list[str], list[list[str]]]:
    be = rep.summary["cost"]["break_even"]
    rows = [
        ["W: tokens written with every entry alive", f"{be['written_tokens_W']:,}"],
        ["R: readable prefix tokens (follow-up turns)", f"{be['readable_tokens_R']:,}"],
        ["R_{>5m} / R_{>1h}", f"{be['readable_over_5m_tokens']:,} / {be['readable_over_1h_tokens']:,}"],
        ["gaps / over 5 min / over 1 h", f"{be['gaps']:,} / {be['gaps_over_5m']:,} / {be['gaps_over_1h']:,}"],
        [
            "long-gap share s (tokens) / (count)",
            f"{_f(be['share_over_5m_tokens_s'], '.4f')} / {_f(be['share_over_5m_count'], '.4f')}",
        ],
        ["break-even share s*", _f(be["break_even_share_s_star"], ".4f")],
        ["cheaper tier for this run", be["cheaper_tier"]],
        ["formula", be["formula"]],
    ]
    return ["quantity", "value"], rows


def goodput_rows(rep: TaskReport) -> tuple[list[str], list[list[str]]]:
    g = rep.summary["goodput"]
    what = (
        f"JCT <= {g['deadline_s']:,.0f} s"
        if g["deadline_s"] is not None
        else f"JCT <= {g['deadline_x']:g} x uncontended JCT"
    )
    rows = [
        ["deadline", what],
        ["attempted / met", f"{g['attempted']:,} / {g['met']:,}"],
        ["goodput", _f(g["goodput"], ".4f")],
        [
            "JCT p50 / uncontended JCT p50 (s)",
            f"{_f(g['jct_p50_s'], ',.1f')} / {_f(g['uncontended_jct_p50_s'], ',.1f')}",
        ],
        ["slowdown (JCT / uncontended) p50 / p90", f"{_f(g['slowdown_p50'], '.2f')} / {_f(g['slowdown_p90'], '.2f')}"],
    ]
    rows += [[f"goodput at {x} x uncontended", _f(v, ".4f")] for x, v in g["at_multiples"].items()]
    rows += [[f"goodput at {int(d):,} s", _f(v, ".4f")] for d, v in g["at_seconds"].items()]
    if g["programs_removed_by_admission"]:
        rows.append(["programs removed by admission (counted as missed)", f"{g['programs_removed_by_admission']:,}"])
    if g["programs_cut"] is not None:
        rows.append(["programs cut by max_model_len (counted as missed)", f"{g['programs_cut']:,}"])
    return ["goodput", "value"], rows


def ttft_rows(rep: TaskReport) -> tuple[list[str], list[list[str]]]:
    rows = [
        [r.step, f"{r.turns:,}", _f(r.ttft_p50_s), _f(r.ttft_p99_s), _f(r.ttft_mean_s), _f(r.queued_p50_s)]
        for r in rep.ttft_steps.itertuples(index=False)
    ]
    return ["step", "turns", "TTFT p50 (s)", "TTFT p99 (s)", "TTFT mean (s)", "queued p50 (s)"], rows


def health_rows(rep: TaskReport) -> tuple[list[str], list[list[str]]]:
    below = rep.summary["cache_health"]["below"]
    rows = [
        [
            r.step,
            f"{r.turns:,}",
            _f(r.hit_share_mean),
            _f(r.reuse_hit_mean),
            _f(r.reuse_hit_p10),
            _f(r.reuse_hit_p50),
            _f(r.reuse_hit_p90),
            _f(r.share_below),
        ]
        for r in rep.health_steps.itertuples(index=False)
    ]
    return ["step", "turns", "hit share mean", "reuse-hit mean", "p10", "p50", "p90", f"share < {below}"], rows


def cause_rows(rep: TaskReport) -> tuple[list[str], list[list[str]]]:
    by = rep.summary["cache_health"]["by_cause"]
    return ["cause", "collapses"], [[k, f"{v:,}"] for k, v in by.items()]


def collapsed_rows(rep: TaskReport, limit: int | None = None) -> tuple[list[str], list[list[str]]]:
    ev = rep.collapse_events.groupby("program_id", sort=False).first() if len(rep.collapse_events) else None
    rows = []
    for r in rep.collapsed.itertuples(index=False):
        e = ev.loc[r.program_id] if ev is not None else None
        rows.append(
            [
                r.program_id,
                f"{r.collapses}",
                f"{r.first_step}",
                r.first_cause,
                _f(e["prev_reuse_hit"]) + " -> " + _f(e["reuse_hit"]) if e is not None else "-",
                _f(e["idle_s"], ",.1f") if e is not None else "-",
                r.causes,
            ]
        )
    if limit is not None:
        rows = rows[:limit]
    return ["program", "collapses", "first step", "first cause", "reuse-hit", "idle s", "all causes"], rows


def _md(head: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return (
        "\n".join(
            ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in esc]
        )
        + "\n"
    )


def render(rep: TaskReport) -> str:
    s = rep.summary
    run = s["run"]
    pr = s["cost"]["prices"]
    th = s["cache_health"]
    policies = ", ".join(f"{k} {v}" for k, v in (run["policy"] or {}).items())
    parts = [
        "# Task-level view of a simulate run\n",
        f"Run: `{s['output']}`: {s['programs']:,} programs, {s['turns']:,} turns, {run['instances']} x "
        f"{run['model']} on {run['gpu']}, arrival {run['arrival']} (concurrency {run['concurrency']}), "
        f"policies: {policies}. Decision log: {'yes' if s['decision_log'] else 'no'}; trace given: "
        f"{'yes' if s['trace'] else 'no (append-only context assumed)'}. Definitions: `agentreplay/fleet/` "
        "module docstrings.\n",
        "## Provider cost per task (prompt-cache pricing)\n",
        f"Prices ({pr['name']}, USD per million tokens; a config, `--prices FILE`): input {pr['input_per_mtok']}, "
        f"5-minute write {pr['cache_write_5m_per_mtok']}, 1-hour write {pr['cache_write_1h_per_mtok']}, read "
        f"{pr['cache_read_per_mtok']}, output {pr['output_per_mtok']}; minimum cacheable prompt "
        f"{pr['min_cacheable_tokens']:,} tokens. Source: {pr['source']}.\n",
        _md(*cost_rows(rep)),
        "\n![cost by TTL](cost_ttl.png)\n",
        "### Break-even share of long gaps between the two TTL tiers\n",
        _md(*break_even_rows(rep)),
        "### Self-hosted GPU time\n",
        "The run's own GPUs, per 1,000 tasks. Attributed: each program's token share of every iteration it ran in x "
        "the iteration's time x the instance's GPUs (`agentreplay/sim/gpu_time.py`), equal to the busy figure; the "
        "difference to GPUs x makespan is idle GPU time no program used.\n",
        _md(*gpu_rows(rep)),
        _md(*gpu_program_rows(rep)),
        "## Task-level goodput\n",
        _md(*goodput_rows(rep)),
        "\n![goodput](goodput.png)\n",
        "## TTFT by step index\n",
        _md(*ttft_rows(rep)),
        "\n![TTFT by step](ttft_by_step.png)\n",
        "## Per-session cache health\n",
        "Per turn: hit share = HBM prefix-cache hit / prompt tokens; reuse-hit = HBM prefix-cache hit / tokens "
        "reusable from the previous turn's context (undefined on first turns). Collapse: previous turn's "
        f"reuse-hit >= {th['above']} and this turn's < {th['below']}: {th['collapses']:,} collapses in "
        f"{th['programs_collapsed']:,} programs.\n",
        _md(*health_rows(rep)),
        "\n",
        _md(*cause_rows(rep)) if th["by_cause"] else "No collapse.\n",
        "\n![cache health](cache_health.png)\n",
    ]
    if len(rep.collapsed):
        head, rows = collapsed_rows(rep, MD_COLLAPSED_ROWS)
        parts += [
            f"\nCollapsed programs (first {min(len(rep.collapsed), MD_COLLAPSED_ROWS)} of "
            f"{len(rep.collapsed):,} by first collapse step; all in `collapsed_programs.parquet`, every "
            "event in `collapses.parquet`):\n\n",
            _md(head, rows),
        ]
    for n in rep.notes:
        parts.append(f"\nNote: {n}\n")
    return "\n".join(parts)
