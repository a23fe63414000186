"""`cachelimit generate`: stream a model's text to stdout with a live status line (tokens, tokens/s, KV bytes).

Imported by the command line only when the command runs (it needs torch and transformers); its arguments have
been checked by `cachelimit.cli` before.
"""

from __future__ import annotations

import argparse

import torch

from ..families.patching import patch
from ..families.table import FAMILIES
from .errors import CliError
from .model_argument import load_model
from .parser import cache_policy
from .pretrained import encode_prompt
from .terminal import KVMeter, LiveTextStreamer, StatusLine
from .tiny_model import HEADER, build_tiny_model


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _bad_device(reason: str) -> CliError:
    return CliError(f"argument --device: {reason}", code=2, prog="cachelimit generate")


def device_from(requested: str | None) -> torch.device:
    """The device of `--device`, refused (exit status 2) unless torch can compute on it here: a name torch knows
    is not enough ('xpu' without an XPU build, 'mps' off a Mac, 'cuda:7' on one GPU), and 'meta' tensors have
    shapes but no data, so a run would fail at its first token. A one-element add, read back, tells."""
    if requested is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as error:
        raise _bad_device(one_line(error)) from None
    if device.type == "meta":
        reason = "'meta' holds no data (shapes only), so nothing can be generated on it"
        raise _bad_device(f"{reason}; give a compute device such as cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise _bad_device(f"{requested!r} asked for, but torch sees no CUDA device")
    try:
        torch.ones(1, device=device).add(1).item()
    except Exception as error:  # whatever the backend raises: AssertionError, NotImplementedError, RuntimeError
        reason = one_line(error).split(". ")[0][:160]
        raise _bad_device(f"torch cannot compute on {requested!r} here: {reason}") from None
    return device


def load_for_run(args: argparse.Namespace):
    """`(model on its device, tokenizer, family, header)` for MODEL (the built-in tiny model when none is given); the
    device is checked before anything is built or loaded."""
    try:
        device, dtype = device_from(args.device), getattr(torch, args.dtype)
    except CliError as error:  # the command that was given names the error (`cachelimit chat: error: ...`)
        error.prog = f"cachelimit {args.command}"
        raise
    if args.model is None:
        (model, tokenizer), family = build_tiny_model(dtype), "llama"
        header = f"cachelimit: {HEADER}"
    else:
        model, tokenizer, family = load_model(args.model, dtype)
        header = f"cachelimit: {args.model} ({family} family), {args.dtype} on {device}"
    return model.to(device), tokenizer, family, header


def run_options(args: argparse.Namespace, model, tokenizer) -> dict:
    """The `generate` keyword arguments the flags ask for (new tokens, sampling, chunked prefill, the window), and a
    pad token where the model has none (transformers warns and picks one otherwise)."""
    options = {"max_new_tokens": args.max_new_tokens, "do_sample": args.sample}
    if args.prefill_chunk_size is not None:
        options["prefill_chunk_size"] = args.prefill_chunk_size
    if model.generation_config.pad_token_id is None:
        options["pad_token_id"] = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
    if args.cache_limit is not None:
        options.update(cache_limit=args.cache_limit, num_sink_tokens=args.sinks)
        if (policy := cache_policy(args)) is not None:
            options["cache_policy"] = policy
    return options


def window_label(args: argparse.Namespace) -> str:
    """How the status line names the cache: "unbounded", or "limit L" with its sinks."""
    if args.cache_limit is None:
        return "unbounded"
    label = f"limit {args.cache_limit}" + (f", {args.sinks} sinks" if args.sinks else "")
    return label + (f", {args.policy}" if args.policy not in (None, "window") else "")


def generate_command(args: argparse.Namespace) -> int:
    """Stream MODEL's text to stdout with a live status line (tokens, tokens/s, KV bytes) on stderr."""
    model, tokenizer, family, header = load_for_run(args)
    device = model.device
    encoded, args.prompt = encode_prompt(tokenizer, args.prompt, args.chat)  # (model inputs, text echoed)
    inputs = {key: encoded[key].to(device) for key in ("input_ids", "attention_mask") if key in encoded}
    prompt_length = inputs["input_ids"].shape[1]
    if prompt_length == 0:
        raise CliError("argument --prompt: the prompt has no tokens; give some text", code=2)
    options, label = run_options(args, model, tokenizer), window_label(args)
    if args.cache_limit is None:
        check = FAMILIES[family].check_generation  # a bounded run is checked by cachelimit's generate
        if check is not None:
            check(model, prompt_length, args.max_new_tokens)
    patch(family)
    torch.manual_seed(args.seed)
    with StatusLine() as status, KVMeter(model) as meter:
        streamer = LiveTextStreamer(tokenizer, status, meter, label, header=header, prompt=args.prompt)
        try:
            with torch.inference_mode():
                model.generate(**inputs, streamer=streamer, **options)
        except KeyboardInterrupt:
            if streamer.generated:  # flush what the streamer still held back, then the last status
                streamer.end()
                status.finish(streamer.line())
            raise
        status.finish(streamer.line())
    return 0
