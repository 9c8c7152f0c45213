"""What the hazard report says about its run: the settings every point shared, stated once, and the count of
samples behind each figure of its cost table (an audit found neither)."""
from rollout_study import hazards
from rollout_study.present import hazards as report
from test_hazards import hazard_result

POLICIES = {"recapture": "dropped", "reuse": "kept"}


def _points(**workload):
    """Two points of a sweep, copy then in-place, which keep their master weights differently (as a real sweep's
    do); `workload`: values of the copy point's workload that differ from in-place's."""
    results = [hazard_result(path, POLICIES) for path in ("copy", "in-place")]
    for result, master in zip(results, ("float32", "none (the rollout weights)")):
        result.metadata["training"].update(master_dtype=master, control_cycles=0)
        result.metadata["workload"]["prompt_source"] = "chat"
    results[0].metadata["workload"].update(workload)
    return results


def _run_block(results) -> list[str]:
    (block,) = [b for b in report.blocks({"spec": {"name": "h"}}, results) if b.text == "Run"]
    return block.body


def test_the_run_block_states_each_shared_setting_once_from_the_points_records():
    results = _points()
    meta = results[0].metadata
    wl, training = meta["workload"], meta["training"]
    lines = _run_block(results)
    assert lines == [
        f"model: {meta['label']} {results[0].model_name}, dtype {meta['dtype']}, "
        f"attention {meta['attention_implementation']}",
        f"device: {meta['device']}, {meta['hardware']['gpu']}",
        f"workload: {wl['requests']} requests, chat prompts, batch size {wl['batch_size']}, batches 4 + 2, "
        f"prompt length {wl['prompt_len']}, {wl['max_new_tokens']} new tokens, {wl['iterations']} iterations per "
        f"phase, {wl['cycles']} cycles, no control cycle, seed {wl['seed']}",
        f"update: {training['optimizer']}, lr {training['lr']:.3f}; master weights by update path: float32 for "
        "copy; none (the rollout weights) for in-place",
        "the matrix's axes: update path down, one point (its own process) each: copy, in-place; graph policy "
        "across, every one in each point's run: recapture, reuse"]
    # the fixture's values, as the audit grepped for them
    assert (meta["dtype"], wl["iterations"], wl["cycles"], training["lr"]) == ("float16", 3, 2, 0.01)
    assert "lr 0.010" in lines[3] and "3 iterations per phase" in lines[2] and "float16" in lines[0]
    text = report.summary({"spec": {"name": "h"}}, results)
    assert text.index("**Answer**") < text.index("**Run**") < text.index("**Verdicts")
    assert text.count("3 iterations per phase") == 1 and "- update: sgd, lr 0.010; master weights" in text


def test_a_setting_that_differs_among_the_points_is_named_per_update_path_not_stated_once():
    lines = _run_block(_points(max_new_tokens=16, iterations=1))
    assert lines[2] == ("workload: 6 requests, chat prompts, batch size 4, batches 4 + 2, prompt length 16, 2 cycles, "
                        "no control cycle, seed 0; new tokens by update path: 16 for copy; 8 for in-place; "
                        "iterations by update path: 1 for copy; 3 for in-place")
    three = [hazard_result(p, POLICIES) for p in ("copy", "assign", "reload")]
    three[1].metadata["workload"]["seed"] = 7
    assert "seed by update path: 7 for assign; 0 for the other 2" in _run_block(three)[2]


def test_the_cost_table_says_how_many_updates_and_calls_each_figure_is_over():
    # 2 cycles: step and sync are update 2's, one sample; first ms the median of 2 calls, steady of 4 (2 per sync)
    two = [hazard_result("copy", POLICIES)]
    two[0].updates[1].extra["step_ms"] = 40.0
    cells = hazards.matrix(two)
    assert cells[0].step_ms == 40.0 and (cells[0].first_calls, cells[0].steady_calls) == (2, 4)
    cost = report.cost_table(cells)
    assert "step ms (update 2 of 2, one sample)" in cost.columns and "sync ms (update 2 of 2, one sample)" in cost
    assert "sync ms (update 2 of 2, one sample)" in report.cells_table(cells).columns
    most = max(hazards.ROLLOUTS_PER_UPDATE)
    caption = report.cost_caption(cells)
    assert ("step and sync: update 2 of 2, one sample (a run's first update pays one-off set-up); first ms: the "
            "median of 2 first calls (one per sync); steady ms: the median of 4 steady calls after the syncs, which "
            f"U={most} counts {most - 1} times") in caption
    text = report.summary({"spec": {"name": "h"}}, two)
    assert f"**{caption}**" in text and "(later updates)" not in text
    assert "trainer step is that process's update 2 of 2, one sample" in text and "that one sample's" in text
    # 4 cycles: a median of updates 2..4, which the table's figure is
    four = [hazard_result("copy", POLICIES, cycles=4)]
    for update, ms in zip(four[0].updates, (500.0, 40.0, 10.0, 30.0)):
        update.extra["step_ms"] = ms
    cells = hazards.matrix(four)
    assert cells[0].step_ms == 30.0 and (cells[0].first_calls, cells[0].steady_calls) == (4, 8)
    assert "step ms (median of updates 2..4)" in report.cost_table(cells).columns
    assert "steady ms: the median of 8 steady calls" in report.cost_caption(cells)
    note, *_ = report.cheapest(cells)
    assert "trainer step is that process's median of updates 2..4" in note and "that one process's" in note
    assert "one sample" not in note
    # one update: the only one, set-up and all
    (alone,) = hazards.matrix([hazard_result("copy", {"reuse": "kept"}, cycles=1)])
    assert report.later_updates([alone]) == "update 1 of 1, one sample, its one-off set-up included"
    assert (alone.first_calls, alone.steady_calls) == (1, 2)
    assert "first ms: the one first call (one per sync); steady ms: the median of 2 steady calls" in (
        report.cost_caption([alone]))


def test_a_sweeps_run_block_states_what_its_points_share_once_and_what_they_vary_by_value():
    from result_fixture import sweep_point
    from rollout_study.present import run_facts
    from rollout_study.present import sweep as sweep_report

    points = [sweep_point(batch, tokens, {"eager": (1, 10.0, 1, 1)}) for batch in (8, 2, 16) for tokens in (64, 16)]
    lines = run_facts.sweep_lines(points)
    (workload,) = [line for line in lines if line.startswith("workload: ")]
    assert "batch size per point: 2, 8, 16" in workload and "new tokens per point: 16, 64" in workload
    meta = points[0].metadata
    assert f"{meta['workload']['iterations']} iterations per phase" in workload  # shared: stated once, no "per point"
    assert workload.count("iterations") == 1
    (update,) = [line for line in lines if line.startswith("update: ")]
    assert update.startswith(f"update: {meta['training']['optimizer']}, lr ")
    assert run_facts.sweep_lines([]) == ["no point has a result to read its settings from"]
    many = run_facts._values([str(b) for b in range(12, 0, -1)])
    assert many == "1, 2, 3, 4, 5, 6, 7, 8 and 4 more"
    record = {"spec": {"name": "s"}, "executor": "local", "wall_s": 1.0}
    loaded = [({"slug": f"p{i}", "status": "valid"}, r) for i, r in enumerate(points)]
    (run,) = [b for b in sweep_report.blocks(record, loaded, None) if b.text == "Run"]
    assert run.body == lines


def test_a_setting_no_run_recorded_is_left_out_of_the_run_block_not_stated_as_a_dash():
    results = [hazard_result(p, POLICIES) for p in ("copy", "in-place")]
    for result in results:
        for key in ("prompt_source", "batch_sizes"):
            result.metadata["workload"].pop(key, None)
    workload = _run_block(results)[2]
    assert workload.startswith("workload: 6 requests, batch size 4, prompt length ") and "-" not in workload


def test_the_report_lists_what_is_not_plainly_right_and_says_when_the_graphs_were_never_captured():
    """Guarded before only by the published summaries, which a rebuilt report would carry any change into."""
    results = [hazard_result("copy", {"recapture": "dropped", "reuse": "kept", "unchecked": "unchanged"},
                             stale={"unchecked"}),
               hazard_result("assign", {"recapture": "dropped", "reuse": "kept"}, changed=0, cycles=3)]
    cells = hazards.matrix(results)
    # the stale table: every cell with a detail (a stale replay, an unproven cell), none of the proven ones
    stale = report.stale_table(cells)
    assert list(zip(stale["update path"], stale["policy"], stale["verdict"])) == [
        ("copy", "unchecked", "STALE"), ("assign", "reuse", "kept, unproven")]
    # the answer names the real cells not proven, and only those
    line = report.real_policies_line(cells)
    assert line == ("recapture and reuse: 0 of 4 cells wrong (STALE, WRONG or failed); 3 proven right; "
                    "not proven: assign x reuse: kept, unproven")
    assert report.diagnostics_line(cells) == ("stale replays shown by the diagnostic policies: 1 cell(s): "
                                              "copy x unchecked")
    assert report.diagnostics_line([c for c in cells if not c.diagnostic]) == "no diagnostic policy ran"
    # runs of 2 and 3 syncs: the caption gives the range of calls its medians are over
    assert "first ms: the median of 2 to 3 first calls" in report.cost_caption(cells)
    # a CPU run captured nothing, so nothing could go stale: said, and only there
    warning = "no CUDA graph (CPU run)"
    assert not any(warning in b.text for b in report.blocks({"spec": {"name": "h"}}, results))
    for result in results:
        result.metadata["cuda_graph"] = False
    assert any(warning in b.text for b in report.blocks({"spec": {"name": "h"}}, results))
