"""Your own tools as a Gymnasium env, rehearsed by SelfSim-v0: a small lending library.

    python examples/bring_your_own_env.py --tasks 50

The toolbox is a plain class: one instance per episode holds that episode's state; its public
methods with type hints and a docstring are the tools. No oracle is given: rehearsal, evaluation
and the fidelity of the imagined results need none.
"""

import argparse
import functools

import gymnasium as gym
import numpy as np

import rehearsal_gym
from rehearsal_gym import ToolTask, make_tool_env
from rehearsal_gym.rehearsal.fidelity import measure_fidelity

TITLES = ("Dune", "Emma", "Ulysses", "Beloved", "Middlemarch", "Kindred", "Persuasion", "Solaris")


class Library:
    def __init__(self, task: ToolTask) -> None:
        self.copies = dict(task.data["copies"])  # title -> copies on the shelf
        self.loans: list[tuple[str, str]] = []

    def search(self, title: str) -> dict:
        """Look a book up.

        Args:
            title: the book's title
        """
        if title not in self.copies:
            raise KeyError(f"no book titled {title!r}")
        return {"title": title, "available": self.copies[title]}

    def borrow(self, title: str, member: str) -> dict:
        """Lend a copy of a book to a member.

        Args:
            title: the book's title
            member: the member's card number
        """
        if self.copies.get(title, 0) < 1:
            raise ValueError(f"{title!r} has no copy on the shelf")
        self.copies[title] -= 1
        self.loans.append((title, member))
        return {"title": title, "member": member, "left": self.copies[title]}


def draw_task(rng: np.random.Generator, index: int) -> ToolTask:
    copies = {str(t): int(rng.integers(0, 3)) for t in rng.choice(TITLES, size=4, replace=False)}
    title, member = str(rng.choice(list(copies))), f"M{int(rng.integers(100, 999))}"
    data = {"copies": copies, "title": title, "member": member}
    if rng.random() < 0.5:
        return ToolTask(f"How many copies of {title} are on the shelf?", data, template="count")
    return ToolTask(
        f"Lend {title} to member {member} if a copy is free; answer yes or no.", data, template="lend"
    )


def reward(task: ToolTask, library: Library, answer: str) -> bool:
    free = task.data["copies"][task.data["title"]]
    if task.template == "count":
        return answer.strip() == str(free) and not library.loans
    lent = library.loans == [(task.data["title"], task.data["member"])]
    return lent == (free > 0) and answer.strip().lower().startswith("yes" if free else "no")


gym.register("Library-v0", entry_point=functools.partial(make_tool_env, Library, draw_task, reward))

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=50, help="held-out tasks")
    args = parser.parse_args()
    gym.utils.env_checker.check_env(gym.make("Library-v0").unwrapped)
    # the shipped default as agent and as environment role: real env vs SelfSim-v0 (wrap mode)
    row = measure_fidelity(rehearsal_gym.default_lm(), "Library-v0", args.tasks)[0]
    print(f"{args.tasks} held-out Library tasks, the default model as agent:")
    print(
        f"  success in the real env {row['success in real env']:.0%}, "
        f"in rehearsal {row['success in rehearsal, real verifier']:.0%}"
    )
    print(
        f"  imagined results: {row['imagined calls']} calls, {row['invalid results']:.0%} unusable, "
        f"{row['field accuracy']:.0%} of real fields reproduced, "
        f"{row['hallucinated fields']:.0%} of imagined fields hallucinated"
    )
