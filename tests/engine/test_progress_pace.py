"""Every phase with done/total reports its rate and time left, frozen while the run is paused."""

from __future__ import annotations

from workbench.progress import Progress, describe


def test_a_phase_reports_rate_and_eta_and_pauses_do_not_count():
    now = [100.0]
    p = Progress(None, None, lambda m: None, clock=lambda: now[0])
    p.report("sft", 0, 160)
    assert "rate" not in p.last and describe(p.last) == "SFT 0/160"  # no rate before a second report
    now[0] += 10.0
    p.report("sft", 5, 160, loss=0.126)
    assert p.last["rate"] == 0.5 and p.last["phase_eta_s"] == 310.0
    assert describe(p.last) == "SFT 5/160 loss 0.126, 0.5 steps/s, 5 min left"
    p.pause()
    now[0] += 600.0  # ten minutes paused: neither the rate nor the ETA moves
    p.resume()
    now[0] += 10.0
    p.report("sft", 10, 160, loss=0.1)
    assert p.last["rate"] == 0.5 and p.last["phase_eta_s"] == 300.0
    # A new phase starts its own clock; the eval counts tasks.
    p.report("eval", 0, 150, label="base")
    now[0] += 30.0
    p.report("eval", 16, 150, label="base")
    assert describe(p.last) == "eval (base) 16/150 tasks, 0.53 tasks/s, 4 min left"


def test_an_eval_batch_in_flight_and_a_refill_round_are_named():
    from workbench.progress import describe

    line = describe(
        {"phase": "eval", "label": "base", "done": 16, "total": 150, "tokens": 24, "max_tokens": 48}
    )
    assert line == "eval (base) 16/150 tasks, batch at 24/48 tok"
    line = describe(
        {"phase": "rollout", "done": 12, "total": 48, "step": 2, "max_steps": 8, "refill": 1, "refills": 4}
    )
    assert line == "step 2/8 rollout 12/48 tok (refill 1/4)"
    assert "refill" not in describe({"phase": "rollout", "done": 12, "total": 48, "step": 2, "max_steps": 8})


def test_paused_time_is_counted_apart_so_a_step_time_leaves_it_out():
    now = [0.0]
    p = Progress(None, None, lambda m: None, clock=lambda: now[0])
    assert p.paused_s == 0.0
    p.pause()
    now[0] += 30.0
    assert p.paused_s == 30.0  # counted while it lasts
    p.resume()
    now[0] += 5.0
    assert p.paused_s == 30.0
