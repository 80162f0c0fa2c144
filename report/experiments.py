"""The report's experiment sections: "Sweep" (the Optuna study in ``<run>/sweep/``, drawn by
``optuna.visualization``) and "Does cleaning pay" (``<run>/ablate/results.json``). A run without either gets
neither section."""
from __future__ import annotations

import json

from experiments.storage import existing_storage
from report.page import html_chart, html_missing, html_section, html_table
from runio.layout import RunPaths


def experiment_sections(paths: RunPaths) -> str:
    return sweep_section(paths) + ablation_section(paths)


def _load_study(paths: RunPaths):
    storage = existing_storage(paths.root)
    if storage is None:
        return None
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    if not names:
        return None
    return optuna.load_study(study_name=names[0], storage=storage)


def _sized(fig, title: str, height: int = 360):
    fig.update_layout(title={"text": title, "x": 0.01}, template="plotly_white", height=height,
                      margin={"l": 60, "r": 20, "t": 48, "b": 48})
    return fig


def sweep_figures(study) -> tuple[list[tuple[str, object]], list[str]]:
    """(name, figure) pairs for the charts that can be drawn, and a note for each that cannot."""
    from optuna import visualization as vis
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    charts, notes = [], []
    if complete:
        charts.append(("sweep-history", _sized(vis.plot_optimization_history(study), "Optimization history")))
        charts.append(("sweep-parallel", _sized(vis.plot_parallel_coordinate(study), "Parallel coordinates")))
    else:
        notes.append("No complete trial yet: no optimization history or parallel coordinates.")
    if len(complete) >= 2 and len(study.best_trial.params) >= 1:
        try:
            charts.append(("sweep-importance", _sized(vis.plot_param_importances(study), "Parameter importances")))
        except (RuntimeError, ValueError) as err:  # e.g. every complete trial has the same value
            notes.append(f"Parameter importances not computable: {err}")
    else:
        notes.append("Parameter importances need at least two complete trials.")
    if any(t.intermediate_values for t in study.get_trials(deepcopy=False)):
        charts.append(("sweep-intermediate", _sized(vis.plot_intermediate_values(study),
                                                    "Validation loss of every trial (pruned trials stop early)")))
    charts.append(("sweep-states", _states_figure(study)))
    return charts, notes


def _states_figure(study):
    import plotly.graph_objects as go

    colors = {"COMPLETE": "#1f77b4", "PRUNED": "#ff7f0e", "FAIL": "#d62728", "RUNNING": "#2ca02c"}
    fig = go.Figure()
    trials = study.get_trials(deepcopy=False)
    for state in ("COMPLETE", "PRUNED", "FAIL", "RUNNING"):
        mine = [t for t in trials if t.state.name == state]
        if not mine:
            continue
        steps = [max(t.intermediate_values) if t.intermediate_values else 0 for t in mine]
        fig.add_trace(go.Bar(x=[t.number for t in mine], y=steps, name=state.lower(),
                             marker_color=colors[state]))
    fig.update_xaxes(title="trial")
    fig.update_yaxes(title="steps trained (last report)")
    return _sized(fig, "Pruned vs completed trials", 300)


def sweep_section(paths: RunPaths) -> str:
    study = _load_study(paths)
    if study is None:
        return ""
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    rows = [[t.number, t.state.name.lower(), t.value if t.value is not None else "",
             ", ".join(f"{k.rsplit('.', 1)[-1]}={v:.4g}" if isinstance(v, float) else f"{k.rsplit('.', 1)[-1]}={v}"
                       for k, v in t.params.items()),
             max(t.intermediate_values) if t.intermediate_values else ""] for t in trials]
    charts, notes = sweep_figures(study)
    summary = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))
    body = f"<p>Study <code>{study.study_name}</code>: {summary}.</p>"
    try:
        best = study.best_trial
        body += (f"<p>Best: trial {best.number}, validation loss {best.value:.4f} "
                 f"(<code>sweep/best.yaml</code>).</p>")
    except ValueError:
        pass
    body += html_table(["trial", "state", "val loss", "parameters", "last reported step"], rows, "sweep-trials")
    body += "".join(html_chart(name, fig) for name, fig in charts) + "".join(html_missing(n) for n in notes)
    return html_section("Sweep", body, "sweep")


def ablation_figure(results: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for row in results["variants"]:
        steps = sorted(int(s) for s in row["val_losses"])
        fig.add_trace(go.Scatter(x=steps, y=[row["val_losses"][str(s)] for s in steps], mode="lines+markers",
                                 name=row["variant"]))
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="validation loss (same held-out text)")
    return _sized(fig, "Validation loss per variant")


def funnel_figure(results: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for row in results["variants"]:
        f = row.get("funnel") or {}
        fig.add_trace(go.Bar(x=["read", "kept", "train docs"], y=[f.get("documents_read") or 0, f.get("kept") or 0,
                                                                  row.get("train_docs") or 0], name=row["variant"]))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="documents")
    return _sized(fig, "Data funnel per variant", 320)


def ablation_section(paths: RunPaths) -> str:
    path = paths.ablation.results
    if not path.is_file():
        return ""
    results = json.loads(path.read_text())
    if not results.get("variants"):
        return ""
    rows = [[r["variant"], r["final_val_loss"], r["tokens_seen"], r.get("train_docs"),
             ", ".join(r.get("steps_enabled", [])),
             " ".join(f"{k}:{v}" for k, v in (r.get("funnel") or {}).get("removed_by_step", {}).items() if v)]
            for r in results["variants"]]
    first = results["variants"][0]
    body = (f"<p>Same model, seed {results['seed']} and budget ({results['steps']} steps × "
            f"{results['global_batch_size']} rows × {results['seq_len']} tokens) per variant; every variant is "
            f"evaluated on the same {first.get('eval_docs')} held-out documents ({first.get('eval_tokens')} tokens) of "
            f"the cleaned corpus, which no variant trained on.</p>")
    body += html_table(["variant", "final val loss", "tokens trained", "train docs", "steps enabled",
                        "removed by step"],
                       rows, "ablation")
    body += (html_chart("ablation-loss", ablation_figure(results))
             + html_chart("ablation-funnel", funnel_figure(results)))
    return html_section("Does cleaning pay", body, "ablation")
