"""Exact resume after SIGKILL: kill the real CLI at random points, rerun it until done.

Each case trains once uninterrupted (the reference) and once killed with SIGKILL at
kill points drawn by ``random.Random(seed)`` — inside train steps, summary writes,
evaluations and every phase of a checkpoint write (``faulty_cli``) — and rerun with
the same command after each kill. The final checkpoint (weights, optimizer, EMA,
RNG, data position, step) and every logged scalar (the last write per step) must
equal the reference's bit for bit. Set ``TG_RESILIENCE_SEED`` to replay a failure.
"""

from __future__ import annotations

import os
import random

import pytest
from resilience_tools import (
    CASES,
    CHECKPOINT_INTERVAL,
    cli_args,
    differences,
    kill_at_random_time,
    load_state,
    random_faults,
    run_cli,
    run_differences,
    run_until_done,
)

SEED = int(os.environ.get("TG_RESILIENCE_SEED", "5"))


def summary_dirs(case: str) -> tuple[str, ...]:
    return ("train", "validation") if CASES[case][2] == "train_and_eval" else ("train",)


def test_kill_in_the_middle_of_a_checkpoint_write_resumes_bitwise(reference, tmp_path):
    rng = random.Random(SEED)
    step = CHECKPOINT_INTERVAL * rng.randint(2, 10)
    fault = f"save:{step}:{rng.choice(['state', 'meta', 'rename'])}"
    print(f"seed={SEED} kill point: {fault}")
    experiment, override, mode = CASES["toy"]
    model_dir = str(tmp_path / "run")
    args = cli_args(experiment, model_dir, override, mode)

    outcome = run_until_done(args, [fault])

    assert outcome.kills == [fault]
    assert outcome.leftovers == []  # The half-written temp dir was cleaned up.
    assert run_differences(reference("toy"), model_dir) == []


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_random_kill_points_resume_bitwise(case, reference, tmp_path):
    rng = random.Random(f"{SEED}-{case}")
    experiment, override, mode = CASES[case]
    evaluate_every = 10 if mode == "train_and_eval" else None
    faults = random_faults(
        rng, 4, evaluate_every=evaluate_every,
        checkpoint_interval=10 if evaluate_every else CHECKPOINT_INTERVAL,
    )
    model_dir = str(tmp_path / "run")
    args = cli_args(experiment, model_dir, override, mode)

    outcome = run_until_done(args, faults)
    found = run_differences(reference(case), model_dir, summary_dirs(case))

    print(f"kill-resume {case}: seed={SEED} kills={outcome.kills} "
          f"bitwise_identical={not found}")
    assert len(outcome.kills) == 4
    assert outcome.leftovers == []
    assert found == []
    if mode == "train_and_eval":  # The best-checkpoint export went the same way.
        best, reference_best = (os.path.join(d, "best_ckpt") for d in (model_dir, reference(case)))
        assert sorted(os.listdir(best)) == sorted(os.listdir(reference_best))
        exported = next(n for n in os.listdir(best) if n.startswith("best_ckpt-"))
        assert differences(load_state(os.path.join(reference_best, exported)),
                           load_state(os.path.join(best, exported))) == []


@pytest.mark.slow
@pytest.mark.parametrize("case", ["toy", "digits_workers2"])
def test_kills_at_random_moments_resume_bitwise(case, reference, tmp_path):
    """Plain ``python -m torchgarden`` killed from outside at random wall-clock moments."""
    rng = random.Random(f"{SEED}-wallclock-{case}")
    experiment, override, mode = CASES[case]
    model_dir = str(tmp_path / "run")
    args = cli_args(experiment, model_dir, override, mode)

    loop_ends = sorted(rng.sample(range(CHECKPOINT_INTERVAL, 60, CHECKPOINT_INTERVAL), 3))
    landed = sum(kill_at_random_time(args, loop_end, rng) for loop_end in loop_ends)
    final = run_cli(args, plain=True)
    found = run_differences(reference(case), model_dir, summary_dirs(case))

    print(f"random-moment kills {case}: seed={SEED} after loops {loop_ends}: landed={landed}/3 "
          f"bitwise_identical={not found}")
    assert final.returncode == 0, final.stderr[-3000:]
    assert landed >= 1
    assert found == []
