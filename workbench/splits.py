"""The validation and test splits a run evaluates on, and what they can say.

Validation (`held_out_eval`) decides: promotion, early stopping, every recipe change. Test (`test_tasks`)
is reported beside it and decides nothing. With one user file and no test tasks in it, the file is split
in two by task hash (deterministic, independent of file order), and a split too small to tell policies
apart gets a warning that states the CI width it gives.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from workbench.skills import task_skills
from workbench.tasks import load_task_source, load_tasks
from workbench.types import Task

BUILTIN_SINGLE_TURN = ("tool_call_eval", "held_out", "builtin:calendar", "validation", "validation_wide")
SMALL_SPLIT = 50  # below this a 95% CI on a success rate near 0.5 is wider than about +-14 points


def ci_half_width(n: int, p: float = 0.5) -> float:
    """Normal-approximation half-width of a 95% CI on a rate over n independent tasks."""
    return 1.96 * math.sqrt(p * (1 - p) / max(1, n))


def _in_test_half(task: Task) -> bool:
    return hashlib.sha256(f"{task.id}\n{task.prompt}".encode()).digest()[0] % 2 == 1


def resolve(
    held_out_eval: str, test_tasks: str, validation: list[Task]
) -> tuple[list[Task], list[Task], list[str]]:
    """(validation tasks, test tasks, warnings) for a config's `held_out_eval` and `test_tasks`."""
    warnings: list[str] = []
    if test_tasks == "none":
        test: list[Task] = []
    elif test_tasks != "auto":
        test = load_task_source(test_tasks, "test")
    elif held_out_eval in BUILTIN_SINGLE_TURN:
        test = load_task_source("test", "test")
    elif Path(held_out_eval).is_file():
        marked = [t for t in load_tasks(held_out_eval) if t.split == "test"]
        if marked:
            test = marked
        else:
            test = [t for t in validation if _in_test_half(t)]
            validation = [t for t in validation if not _in_test_half(t)]
            warnings.append(
                f"{held_out_eval}: no test tasks given; split it by task hash into {len(validation)} "
                f"validation and {len(test)} test tasks (name test_tasks: to choose them yourself)"
            )
    else:
        test = []
        warnings.append(
            f"{held_out_eval}: no built-in test split for this source; results are validation only "
            "(name test_tasks: to add one)"
        )
    ids = {t.id for t in validation}
    if any(t.id in ids for t in test):
        raise ValueError(
            "test_tasks share task ids with held_out_eval: a test split must be disjoint from validation"
        )
    for name, tasks in (("validation", validation), ("test", test)):
        if tasks and len(tasks) < SMALL_SPLIT:
            warnings.append(
                f"the {name} split has {len(tasks)} tasks: a success rate's 95% CI is about "
                f"±{100 * ci_half_width(len(tasks)):.0f} points, too wide to tell close policies apart"
            )
    if not validation:
        raise ValueError(f"{held_out_eval}: no validation tasks left after taking out the test split")
    return validation, test, warnings


def grpo_holdout(tasks: list[Task], share: float) -> tuple[list[Task], list[Task]]:
    """(the SFT warm-up's tasks, GRPO's tasks) for `grpo_holdout: share`: that share of each tool's phrasing
    templates (a task without a template is its own) is kept out of SFT and is all GRPO samples from.

    Why: SFT on a request memorises its answer, so GRPO's groups on requests SFT saw are all right and carry
    no gradient (docs/results.md: 10 of 59 groups had any reward variance). On phrasings SFT never imitated
    the policy still errs sometimes, which is the signal GRPO learns from. Per tool, so every tool keeps
    phrasings on both sides; by hash, so the split does not depend on file order."""
    if share == 0.0:  # Config checks 0 <= share < 1
        return list(tasks), list(tasks)
    keys = [f"template:{t.template}" if t.template else f"task:{t.id}" for t in tasks]
    by_tool: dict[str, set[str]] = {}
    for t, key in zip(tasks, keys, strict=True):
        by_tool.setdefault(str(t.expected_tool), set()).add(key)
    held: set[str] = set()
    for tool_keys in by_tool.values():
        ordered = sorted(tool_keys, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
        k = min(len(ordered) - 1, max(1, round(share * len(ordered))))  # both sides keep a phrasing
        held.update(ordered[:k])
    return (
        [t for t, key in zip(tasks, keys, strict=True) if key not in held],
        [t for t, key in zip(tasks, keys, strict=True) if key in held],
    )


def with_skills(tasks: list[Task], skills: list[str]) -> list[Task]:
    """The tasks exercising any of `skills` (`grpo_skills`), in their order; all of them when `skills` is
    empty. Why: after the warm-up most requests are solved every time and their groups carry no gradient;
    GRPO spent on the skill the SFT policy still gets wrong sometimes (on the demo, 12-hour times: 0.83-0.93
    on fresh train-like requests) has reward variance to learn from. Raises when no task has one."""
    if not skills:
        return list(tasks)
    wanted = set(skills)
    kept = [t for t in tasks if wanted & set(task_skills(t))]
    if not kept:
        raise ValueError(f"grpo_skills: none of GRPO's {len(tasks)} training tasks exercises any of {skills}")
    return kept


def weighted_by_skills(tasks: list[Task], weights: dict[str, int]) -> list[Task]:
    """`sft_skill_weights`: each task repeated by the largest weight among its skills (once when it has none
    of them), in order. The warm-up shuffles this list, so a weight-2 task is twice as likely to be drawn; the
    steps, and so the cost, stay the same. Raises when a weighted skill is in none of the tasks (a weight
    that would silently do nothing)."""
    if not weights:
        return list(tasks)
    out: list[Task] = []
    seen: set[str] = set()
    for t in tasks:
        mine = [s for s in task_skills(t) if s in weights]
        seen.update(mine)
        out += [t] * max((weights[s] for s in mine), default=1)
    if missing := sorted(set(weights) - seen):
        raise ValueError(
            f"sft_skill_weights: none of the warm-up's {len(tasks)} training tasks exercises {missing}"
        )
    return out


def stage_tasks(
    train: list[Task], holdout: float, skills: list[str], sft_weights: dict[str, int] | None = None
) -> tuple[list[Task], list[Task]]:
    """(the SFT warm-up's examples, GRPO's tasks) for a config's `grpo_holdout`, `grpo_skills` and
    `sft_skill_weights`: the one place all three are applied, so the trainer and the preflight check select
    the same tasks. The SFT list repeats a task its weight's number of times.

    SFT keeps single-call tasks only: a multi-step task (judged on `expected_state`) has no gold trajectory,
    and imitating its `expected_tool` as the first reply would teach acting before looking. Such tasks are
    learnt by GRPO from the final-state reward alone."""
    sft, rl = grpo_holdout(train, holdout)
    sft = [t for t in sft if t.expected_state is None]
    return weighted_by_skills(sft, sft_weights or {}), with_skills(rl, skills)
