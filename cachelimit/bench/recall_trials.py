"""Runs the trials `bench.recall.plan` lists, one at a time, into journal records (one JSON object per trial).

A record holds the trial's identity (`recall.TRIAL_FIELDS`), the key and the greedy answer, `correct`, the prompt's
tokens and where the fact sat in it, timings (wall, CPU, load average) and the versions. A trial the oracle cannot
serve (its sinks and fact fill the budget) is recorded with `error` and no verdict, never as a wrong answer.
"""

from __future__ import annotations

import platform

import torch
import transformers

from .recall_prompts import filler_messages, pass_key_prompt, score_answer, text_prompt, trial_key
from .recall_run import answer_prompt, chat_trial, perplexity_run, timed
from .scoring import default_text, text_tokens


class Trials:
    """The model, its tokenizer, the tokenised default text and the prompts built so far (a trial's prompt is
    built once for all its variants)."""

    def __init__(self, model, tokenizer, args):
        self.model, self.tokenizer, self.args = model, tokenizer, args
        self._text: torch.Tensor | None = None
        self._prompts: dict = {}

    @property
    def text_ids(self) -> torch.Tensor:
        if self._text is None:
            self._text = text_tokens(self.tokenizer, default_text())
        return self._text

    def prompt(self, job: dict):
        where = (job["case"], job["length"], job["depth"], job["trial"])
        if where not in self._prompts:
            self._prompts = {}  # jobs come trial by trial: keep only the current one
            depth = job["depth"] / 100
            if job["case"] == "passkey":
                built = pass_key_prompt(self.tokenizer, job["length"], depth, job["seed"], job["trial"])
            else:
                ids = self.text_ids[0].tolist()
                built = text_prompt(self.tokenizer, ids, job["length"], depth, job["seed"], job["trial"])
            self._prompts[where] = built
        return self._prompts[where]

    def run(self, job: dict) -> dict:
        record = dict(job)
        try:
            record.update(self._run(job))
        except ValueError as error:  # refused (a budget the oracle keep-set does not fit in, or a setting this
            # transformers release cannot serve, e.g. chunked chat turns before 5.21): no verdict
            record.update(error=str(error), correct=None)
        record.update(python=platform.python_version(), torch=torch.__version__)
        record.update(transformers=transformers.__version__, threads=torch.get_num_threads())
        return record

    def _run(self, job: dict) -> dict:
        variant, budget, chunk = job["variant"], job["budget"], job["chunk"]
        if job["case"] == "ppl":
            ids = self.text_ids[:, : job["length"]]
            result, figures = timed(perplexity_run, self.model, ids, variant, budget, chunk, job["protected"])
            return {**result, **figures}
        if job["case"] == "chat":
            key, _ = trial_key(job["seed"], "chat-key", job["length"], job["trial"])
            messages = filler_messages(self.text_ids[0].tolist(), self.tokenizer, job["length"], job["turn_tokens"],
                                       job["seed"], job["trial"])  # fmt: skip
            (answer, before), figures = timed(
                chat_trial, self.model, self.tokenizer, messages, key, variant, budget, job["turn_answer_tokens"],
                job["answer_tokens"], job["protected"], chunk,
            )  # fmt: skip
            result = {"key": key, "conversation_tokens": before, "turns": len(messages) + 2}
        else:
            prompt = self.prompt(job)
            answer, figures = timed(
                answer_prompt, self.model, prompt, variant, budget, chunk, job["answer_tokens"], job["protected"]
            )
            key = prompt.key
            result = {"key": key, "prompt_tokens": len(prompt.ids), "needle": list(prompt.needle)}
        text = self.tokenizer.decode(answer, skip_special_tokens=True)
        return {**result, "answer": text, "correct": score_answer(text, key), **figures}

    @staticmethod
    def describe(record: dict) -> str:
        where = f"{record['case']} {record['length']}"
        if record.get("depth") is not None:
            where += f" depth {record['depth']}%"
        budget = "unbounded" if record["budget"] is None else f"L={record['budget']}"
        head = f"{where} #{record['trial']} {record['prefill']} {record['variant']} {budget}"
        if record.get("error"):
            return f"{head}: not run ({record['error']})"
        if record["case"] == "ppl":
            return f"{head}: perplexity {record['perplexity']:.3f} ({record['seconds']:.0f} s)"
        verdict = "right" if record["correct"] else "wrong"
        return f"{head}: {verdict}, key {record['key']}, answer {record['answer']!r} ({record['seconds']:.1f} s)"
