"""gpu_check.md, rendered from gpu_check.json alone (the JSON is the source of truth): the machine,
the models, one overview row per check (status, target met, summary), then each check's numbers.

    render_md(json.loads(Path("OUT/gpu_check.json").read_text()))
    python bench/gpu_check.py --render OUT/gpu_check.json      # rewrites OUT/gpu_check.md

A check's section appears only when the JSON has its numbers, so a run cut short, a subset
(`--only`) or the dry run renders what it measured and nothing else.
"""

from __future__ import annotations


def _f(v, fmt=".3g") -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    return format(v, fmt)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _batch(row: dict) -> str:
    """An exactness row's setting: its batch size, or its token budget."""
    if row.get("batch_tokens") is None:
        return str(row["batch_size"])
    return f"{row['batch_tokens']} tokens" + (" (all items)" if row.get("all_items") else "")


def _batch_used(sp: dict) -> str:
    """What the speed check's evaluate() ran at: items per pass, or a token budget."""
    if sp.get("batch_tokens_used") is not None:
        return f"{sp['batch_tokens_used']} tokens"
    return str(sp["batch_size_used"])


def _setting(row: dict) -> str:
    """A speed row's flag: `--batch-size N` or `--batch-tokens N`."""
    if row.get("batch_tokens") is not None:
        return f"--batch-tokens {row['batch_tokens']}"
    return f"--batch-size {row['batch_size']}"


def render_md(doc: dict) -> str:
    """gpu_check.md from gpu_check.json: the overview table, then each check's numbers."""
    env = doc.get("environment", {})
    gpu = env.get("gpu") or {}
    lines = [
        f"# base-bench GPU check ({doc.get('mode')})",
        "",
        f"Written by `{doc.get('command')}`, started {doc.get('started')}, "
        f"{_f(doc.get('wall_s'), '.0f')} s of {_f(doc.get('budget_s'), '.0f')} s budget.",
        "",
        f"Machine: {gpu.get('name', 'no GPU')}"
        + (
            f" ({gpu.get('total_memory_gib')} GiB, capability {gpu.get('capability')}, driver {gpu.get('driver')})"
            if gpu
            else ""
        )
        + f"; {env.get('cpus')} CPUs; Python {env.get('python')}, torch {env.get('torch')} "
        f"(CUDA {env.get('cuda_runtime')}), transformers {env.get('project_dependencies', {}).get('transformers')}, "
        f"accelerate {env.get('project_dependencies', {}).get('accelerate')}; commit {env.get('git_commit')}.",
        "",
    ]
    models = doc.get("models", {})
    for key, m in models.items():
        lines.append(
            f"Model `{key}`: hidden {m.get('hidden_size')}, {m.get('num_hidden_layers')} layers, "
            f"{m.get('num_attention_heads')} heads ({m.get('num_key_value_heads')} KV), intermediate "
            f"{m.get('intermediate_size')}, vocab {m.get('vocab_size')}, {m.get('n_parameters'):,} parameters, "
            f"attention `{m.get('attn_implementation')}`; random weights, seed {doc.get('seed')}."
        )
    lines += [
        "",
        f"Data: {doc.get('data', {}).get('items')} items of the bundled set.",
        "",
        "| check | status | target met | result |",
        "|---|---|---|---|",
    ]
    for c in doc.get("checks", []):
        status = c["status"] + (f" ({c['seconds']:.0f} s)" if c.get("seconds") is not None else "")
        text = c.get("summary") or c.get("reason") or c.get("error") or ""
        lines.append(f"| {c['title']} | {status} | {_f(c.get('met'))} | {_cell(text)} |")
    lines.append("")
    by = {c["name"]: c for c in doc.get("checks", [])}
    ex = by.get("exactness", {})
    if ex.get("rows"):
        lines += [
            "## Exactness",
            "",
            f"Target: {ex.get('target')}.",
            "",
            "| model | dtype | scorer | batch | LM head | seconds | max abs Δ | median abs Δ | p99 abs Δ | "
            "predictions ≠ loop |",
            "|---|---|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for r in ex["rows"] + ex.get("token_rows", []):
            if "error" in r:
                lines.append(
                    f"| {r['model']} | {r['dtype']} | {r['scorer']} | {_batch(r)} | failed: {_cell(r['error'])} |||||| "
                )
                continue
            lines.append(
                f"| {r['model']} | {r['dtype']} | {r['scorer']} | {_batch(r)} | {r.get('lm_head_mode')} "
                f"| {_f(r['seconds'], '.2f')} "
                f"| {_f(r['max_abs_delta'], '.2e')} | {_f(r['median_abs_delta'], '.1e')} | "
                f"{_f(r['p99_abs_delta'], '.1e')} | {r['predictions_differ']} of {ex.get('items')} |"
            )
        refs = ", ".join(f"{r['model']} {r['dtype']} {r['seconds']:.1f} s" for r in ex.get("reference_loop", []))
        lines += ["", f"Card-literal loop: {refs}. LM head: {ex.get('lm_head_modes')}."]
        if ex.get("skipped_at_time_limit"):
            lines.append(f"Skipped at the time limit: {len(ex['skipped_at_time_limit'])} runs.")
        lines.append("")
    bf = by.get("bf16_vs_fp32", {})
    if bf.get("rows"):
        lines += [
            "## bfloat16 against float32",
            "",
            "| comparison | max abs Δ | median abs Δ | p99 abs Δ | "
            "predictions flip | largest float32 margin of a flipped item |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in bf["rows"]:
            lines.append(
                f"| {r['comparison']} | {_f(r['max_abs_delta'], '.3g')} | {_f(r['median_abs_delta'], '.2g')} | "
                f"{_f(r['p99_abs_delta'], '.2g')} | {r['predictions_differ']} of {bf.get('items')} | "
                f"{_f(r['largest_float32_margin_of_a_flipped_item'], '.3g')} |"
            )
        lines += [
            "",
            f"Median float32 margin (best minus second-best mean log-prob) over all items: "
            f"{_f(bf.get('float32_margin_median'), '.3g')}.",
            "",
        ]
    ba = by.get("batch_auto", {})
    if ba.get("auto"):
        lines += ["## --batch-size auto", ""]
        for a in ba["auto"]:
            probes = ", ".join(f"{n}: {r}" for n, r in a["probes"]) or "none (CPU)"
            lines.append(f"- {a['dtype']}: picks **{a['batch_size']}** in {a['seconds']:.2f} s; probes {probes}")
        for a in ba.get("auto_tokens", []):
            if a.get("batch_tokens") is None:
                lines.append(f"- {a['dtype']}, token budget: no search on a CPU ({a['batch_size']} items per pass)")
                continue
            probes = ", ".join(f"{n} items in {pos} positions: {r}" for n, pos, r in a["probes"])
            lines.append(
                f"- {a['dtype']}, token budget (what evaluate() searches): picks **{a['batch_tokens']} tokens** "
                f"in {a['seconds']:.2f} s ({a['rows']} rows of at most {a['row_length']} positions hold every "
                f"item: {a['all_items_tokens']} tokens); probes {probes}"
            )
        oom = ba.get("forced_oom", {})
        if "skipped" in oom:
            lines.append(f"- forced out-of-memory: skipped, {oom['skipped']}")
        elif "error" in oom:
            lines.append(f"- forced out-of-memory: failed, {oom['error']}")
        elif oom:
            lines.append(
                f"- forced out-of-memory ({oom['dtype']}): batch {oom['batch_size_asked']} needs "
                f"{oom['memory_for_that_batch_gib']} GiB above the weights; the process capped at "
                f"{oom['cap_gib']} GiB ({oom.get('headroom_gib')} GiB above what it held, fraction "
                f"{oom['cap_fraction']}), evaluate() ran at batch {oom['batch_size_used']}; logged: "
                f"{'; '.join(oom['halvings_logged']) or 'nothing'}; auto under the cap picks "
                f"{(oom.get('auto_under_the_cap') or {}).get('batch_size')}; |Δ| vs the uncapped scorer at "
                f"that batch size {_f(oom['vs_uncapped_same_batch_size']['max_abs_delta'], '.2e')}, vs the "
                f"loop {_f(oom['vs_reference_loop']['max_abs_delta'], '.2e')}, predictions ≠ loop "
                f"{oom['vs_reference_loop']['predictions_differ']}"
            )
        ot = ba.get("forced_oom_tokens", {})
        if "skipped" in ot or "error" in ot:
            pass  # said once above
        elif ot:
            lines.append(
                f"- forced out-of-memory by tokens ({ot['dtype']}), same cap: a budget of "
                f"{ot['batch_tokens_asked']} tokens needs {ot['memory_for_that_batch_gib']} GiB above the weights; "
                f"evaluate() ran at {ot['batch_tokens_used']} tokens per pass; logged: "
                f"{'; '.join(ot['halvings_logged']) or 'nothing'}; auto under the cap picks "
                f"{(ot.get('auto_under_the_cap') or {}).get('batch_tokens')} tokens; |Δ| vs the uncapped scorer "
                f"at that budget {_f(ot['vs_uncapped_same_budget']['max_abs_delta'], '.2e')}, vs the loop "
                f"{_f(ot['vs_reference_loop']['max_abs_delta'], '.2e')}, predictions ≠ loop "
                f"{ot['vs_reference_loop']['predictions_differ']}"
            )
        lines.append("")
    sp = by.get("speed", {})
    if sp.get("breakdown"):
        b, fl, mem = sp["breakdown"], sp["flops"], sp.get("memory") or {}
        ph, pr = b["phases"], b.get("profile", {})
        lines += [
            "## Speed",
            "",
            f"Target: {sp['target']}.",
            "",
            "| load s | evaluate() wall s | scoring s | batch | fed tokens/s | pair tokens/s | peak GiB allocated "
            "(reserved) | TFLOP fed | TFLOP/s | of 790 TFLOP/s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {_f(sp['load_s'], '.2f')} | {_f(sp['evaluate_wall_s'], '.2f')} | {_f(sp['scoring_s'], '.3f')} | "
            f"{_batch_used(sp)} | {_f(sp['tokens_per_s']['fed'], '.0f')} | {_f(sp['tokens_per_s']['pair'], '.0f')} | "
            f"{_f(mem.get('peak_allocated_gib'))} ({_f(mem.get('peak_reserved_gib'))}) | "
            f"{_f(fl['fed_with_padding_tflop'])} | {_f(fl['achieved_tflop_per_s'])} | "
            f"{_f(fl['fraction_of_790_tflops_peak'], '.2%') if fl['fraction_of_790_tflops_peak'] is not None else '–'} |",
            "",
            f"LM head mode: {sp.get('lm_head_mode')}"
            + ("." if sp.get("lm_head_mode") == "mask" else f" ({sp.get('lm_head_modes')})."),
            "",
            f"Tokens: {sp['tokens']['fed_without_padding']} fed without padding, "
            f"{sp['tokens']['fed_with_padding']} with padding ({_f(sp['tokens'].get('padding_fraction'), '.1%')} "
            f"padding), {sp['tokens']['kept_for_the_lm_head']} through "
            f"the LM head; FLOPs with each context once and no padding: "
            f"{fl['each_context_once_no_padding_tflop']} TFLOP; at the peak the fed FLOPs take "
            f"{fl['seconds_at_peak']} s.",
            "",
            "Where the time goes (each piece measured on its own, after evaluate()):",
            "",
            f"- tokenizing the items: {b['tokenize_s']:.3f} s; packing check: {b['packing_check_s']:.3f} s; "
            f"auto search: {b['auto_search_s']:.3f} s (not in scoring_s)",
            f"- a second scoring pass: {b['second_scoring_pass_s']:.3f} s (|Δ| vs evaluate() "
            f"{_f(b['second_pass_vs_evaluate']['max_abs_delta'], '.1e')})",
            f"- per batch, synchronised: host prep and copies {ph['host_prep_and_copy_s']:.3f} s, forward "
            f"{ph['forward_s']:.3f} s, after the forward {ph['after_forward_s']:.3f} s (total {ph['total_s']:.3f} s)",
            f"- host-to-device bytes per pass: {b['host_to_device_bytes_per_pass'] / 1e6:.1f} MB",
        ]
        if "error" in pr:
            lines.append(f"- profiler: failed, {pr['error']}")
        elif pr:
            kinds = "; ".join(f"{k} {v['count']}× {v['s']:.3f} s" for k, v in sorted(pr["device_events"].items()))
            h = pr["host"]
            lines.append(
                f"- profiled pass {pr['wall_s']:.3f} s: device busy {pr['device_busy_s']:.3f} s "
                f"({kinds or 'no device events'}); host: {h['launch_calls']} launches "
                f"({h['launch_s']:.3f} s), {h['memcpy_calls']} memcpy calls ({h['memcpy_s']:.3f} s), "
                f"{h['sync_s']:.3f} s synchronising, {h['aten_ops']} aten ops"
            )
        lines += [
            "",
            "The same pass cut other ways, by items and by tokens (padding against launches; positions held: "
            "each context once, each continuation but its last token; TFLOP held: each context once, no padding):",
            "",
            "| setting | passes | seconds | positions fed | positions held | padding | TFLOP fed | TFLOP held |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in b.get("by_batch_size", []) + b.get("by_batch_tokens", []):
            lines.append(
                f"| {_setting(r)} | {_f(r.get('passes'))} | {r['seconds']:.3f} | {r['positions_with_padding']} | "
                f"{_f(r.get('positions_held'))} | {_f(r.get('padding_fraction'), '.1%')} | {r['tflop_fed']} | "
                f"{_f(r.get('tflop_held'))} |"
            )
        lines.append("")
    for name, head in (("evaluate", "evaluate()"), ("torchrun", "torchrun"), ("device_map", "--device-map")):
        c = by.get(name, {})
        if c.get("status") == "ok":
            lines += [f"## {head}", "", c.get("summary", "")]
            if name == "torchrun":
                ch = c["child"]
                lines += [
                    "",
                    f"Backend {ch['backend']} (NCCL {ch.get('nccl_version')}), world {ch['world_size']}, "
                    f"device {ch['device']}; init {ch['init_s']} s, load {ch['load_s']} s, evaluate "
                    f"{ch['evaluate_s']} s. What ran over the backend: {c['what_ran_over_the_backend']}.",
                ]
            if name == "device_map":
                lines += [""] + [
                    f"- {k}: `{r['flags']}`: load {_f(r['load_s'], '.1f')} s, scoring "
                    f"{_f(r['scoring_s'], '.2f')} s, whole command {_f(r['wall_s'], '.1f')} s, placement "
                    f"{r['placement'] or 'one device'}"
                    for k, r in c["runs"].items()
                ]
            lines.append("")
    if doc.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in doc["notes"]] + [""]
    return "\n".join(lines)
