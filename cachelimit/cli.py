"""`cachelimit` on the command line: watch the KV cache stay flat while a model generates.

    cachelimit demo                                   # offline: unbounded vs bounded, table + plot
    cachelimit generate --cache-limit 256             # the built-in tiny model, streamed, live KV size
    cachelimit generate gpt2 --prompt "Hello" --max-new-tokens 500 --cache-limit 128 --sinks 4
    cachelimit generate smollm2 --chat "Tell me a story" --cache-limit 256 --sinks 4   # a real model, offline
    cachelimit bench --quick                          # the benchmark sweep (see cachelimit.benchmark)

Every failure is one line on stderr and a non-zero exit: 2 for bad input, 1 when a model cannot be loaded or
a run fails, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from . import __version__, supported_families
from .loading import LoadError, resolve_source

DTYPES = ("float32", "bfloat16")


class CliError(Exception):
    """A failure the user can act on; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1, prog: str = "cachelimit"):
        super().__init__(message)
        self.code, self.prog = code, prog


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block): the --help of the command says the rest."""

    def error(self, message: str):
        raise CliError(f"{message} (see `{self.prog} --help`)", code=2, prog=self.prog)


def int_at_least(minimum: int):
    """An argparse type: an int >= `minimum`, with the allowed range in the error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an int >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an int >= {minimum}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def add_window_arguments(parser: argparse.ArgumentParser, default_limit: int | None) -> None:
    unbounded = "unbounded, for comparison" if default_limit is None else str(default_limit)
    parser.add_argument(
        "--cache-limit",
        type=positive_int,
        default=default_limit,
        metavar="L",
        help=f"keep at most L cached positions per layer (default: {unbounded})",
    )
    parser.add_argument(
        "--sinks",
        type=non_negative_int,
        default=None,
        metavar="S",
        help="of those, pin the first S tokens (attention sinks, StreamingLLM); needs S < L",
    )


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks argparse cannot express on one argument alone."""
    if getattr(args, "prompt", None) == "":
        parser.error("argument --prompt: must not be empty")
    if getattr(args, "model", None) is not None:
        resolve_source(args.model)  # a mistyped local path fails now, before any import or download
    if args.sinks is not None and args.cache_limit is None:
        parser.error("argument --sinks: needs --cache-limit (sinks live inside a bounded cache)")
    if args.sinks is not None and args.sinks >= args.cache_limit:
        parser.error(
            f"argument --sinks: must be an int in [0, {args.cache_limit - 1}] (below --cache-limit), got {args.sinks}"
        )


def build_parser() -> _Parser:
    parser = _Parser(
        prog="cachelimit",
        description="Bound the KV cache of Hugging Face transformers generation, and watch it stay flat.",
    )
    parser.add_argument("--version", action="version", version=f"cachelimit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    generate = commands.add_parser(
        "generate",
        help="stream text from a model with a live KV-cache readout",
        description="Generate text from MODEL, streamed to stdout, with tokens, tokens/s and the KV cache size "
        "shown live on stderr. Without --cache-limit the cache is unbounded, for comparison.",
    )
    generate.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help="a transformers model name or local directory (model + tokenizer), `smollm2` (a real model, offline, "
        f"see README) or by default the built-in tiny model. Supported families: {', '.join(supported_families())}",
    )
    text = generate.add_mutually_exclusive_group()
    text.add_argument("--prompt", default="Once upon a time", metavar="TEXT", help="(default: %(default)r)")
    text.add_argument("--chat", metavar="MESSAGE", help="a user message in the model's chat template (smollm2)")
    generate.add_argument("--max-new-tokens", type=positive_int, default=200, metavar="N", help="(default: 200)")
    add_window_arguments(generate, default_limit=None)
    generate.add_argument(
        "--prefill-chunk-size",
        type=positive_int,
        metavar="C",
        help="read the prompt C tokens at a time (with --cache-limit every prompt token obeys the window)",
    )
    generate.add_argument("--dtype", choices=DTYPES, default="float32", help="(default: float32)")
    generate.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    generate.add_argument("--seed", type=int, default=0, metavar="K", help="random seed for --sample (default: 0)")
    generate.set_defaults(parser=generate)
    mode = generate.add_mutually_exclusive_group()
    mode.add_argument("--sample", dest="sample", action="store_true", help="sample from the model")
    mode.add_argument("--greedy", dest="sample", action="store_false", help="pick the likeliest token (default)")

    demo = commands.add_parser(
        "demo",
        help="offline: unbounded vs bounded cache on smollm2 if installed, else the tiny model; table + PNG plot",
        description="Generate with a model twice, unbounded and with a cache limit; print the KV cache size side "
        "by side and plot it against the generated tokens.",
    )
    demo.add_argument("--model", choices=("auto", "tiny", "smollm2"), default="auto", help="auto: smollm2 if found")
    demo.add_argument("--tokens", type=positive_int, metavar="N", help="tokens per run (default: 3000; smollm2: 1000)")
    add_window_arguments(demo, default_limit=256)
    demo.set_defaults(sinks=4, parser=demo)
    demo.add_argument("--out", type=Path, default=Path("cachelimit_out"), metavar="DIR", help="(default: %(default)s)")

    commands.add_parser(
        "bench",
        add_help=False,
        help="run the benchmark sweep; all arguments go to it (`cachelimit bench --help`)",
    )
    return parser


def run_bench(argv: list[str]) -> int:
    """`bench` is a thin front: its arguments, --help included, belong to `cachelimit.benchmark.main` (speed)
    or, with --quality, to `cachelimit.quality.main` (what a bounded cache does to a real model's text)."""
    import importlib

    name = "quality" if "--quality" in argv else "benchmark"
    argv = [arg for arg in argv if arg != "--quality"]
    try:
        benchmark = importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__package__}.{name}":  # a missing dependency of the module: report it
            raise
        if {"-h", "--help"} & set(argv):
            print(
                "usage: cachelimit bench [--quick] [--out DIR] ...\n\nRuns the benchmark sweep (--quick: a reduced one)."
            )
            print("This installation has no cachelimit.benchmark module, so its options cannot be listed.")
            return 0
        raise CliError("this installation has no cachelimit.benchmark module; `cachelimit bench` needs it") from None
    try:
        return int(benchmark.main(argv) or 0)
    except SystemExit as exit_:  # its own argparse (--help, bad options) exits; keep that status
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)


def _device(requested: str | None):
    import torch

    if requested is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as error:
        raise CliError(f"argument --device: {_one_line(error)}", code=2) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CliError(f"argument --device: {requested!r} asked for, but torch sees no CUDA device", code=2)
    return device


def generate_command(args: argparse.Namespace) -> int:
    """Stream MODEL's text to stdout with a live status line (tokens, tokens/s, KV bytes) on stderr."""
    import torch

    from . import patch
    from .live import KVMeter, LiveTextStreamer, StatusLine
    from .loading import load_model
    from .patches import FAMILIES
    from .pretrained import encode_prompt
    from .tiny_model import HEADER, build_tiny_model

    device, dtype = _device(args.device), getattr(torch, args.dtype)
    if args.model is None:
        (model, tokenizer), family = build_tiny_model(dtype), "llama"
        header = f"cachelimit: {HEADER}"
    else:
        model, tokenizer, family = load_model(args.model, dtype)
        header = f"cachelimit: {args.model} ({family} family), {args.dtype} on {device}"
    model = model.to(device)
    encoded, args.prompt = encode_prompt(tokenizer, args.prompt, args.chat)  # (model inputs, text echoed)
    inputs = {key: encoded[key].to(device) for key in ("input_ids", "attention_mask") if key in encoded}
    prompt_length = inputs["input_ids"].shape[1]
    if prompt_length == 0:
        raise CliError("argument --prompt: the prompt has no tokens; give some text", code=2)
    options = {"max_new_tokens": args.max_new_tokens, "do_sample": args.sample}
    if args.prefill_chunk_size is not None:
        options["prefill_chunk_size"] = args.prefill_chunk_size
    if model.generation_config.pad_token_id is None:
        options["pad_token_id"] = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
    if args.cache_limit is None:
        label = "unbounded"
        check = FAMILIES[family].check_generation  # a bounded run is checked by cachelimit's generate
        if check is not None:
            check(model, prompt_length, args.max_new_tokens)
    else:
        options.update(cache_limit=args.cache_limit, num_sink_tokens=args.sinks)
        label = f"limit {args.cache_limit}" + (f", {args.sinks} sinks" if args.sinks else "")
    patch(family)
    torch.manual_seed(args.seed)
    with StatusLine() as status, KVMeter(model) as meter:
        streamer = LiveTextStreamer(tokenizer, status, meter, label, header=header, prompt=args.prompt)
        with torch.inference_mode():
            model.generate(**inputs, streamer=streamer, **options)
        status.finish(streamer.line())
    return 0


def _quiet_libraries() -> None:
    """The CLI's stderr is its status line and one-line errors; library warnings would break both."""
    import warnings

    import huggingface_hub
    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    huggingface_hub.utils.logging.set_verbosity_error()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return run_bench(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(args.parser, args)
    _quiet_libraries()
    if args.command == "generate":
        return generate_command(args)
    from .demo import demo_command

    return demo_command(args)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def main(argv: list[str] | None = None) -> int:
    """Entry point of `cachelimit` and `python -m cachelimit`; returns the exit status."""
    prog = "cachelimit"
    try:
        return run(argv)
    except CliError as error:
        message, code, prog = _one_line(error), error.code, error.prog
    except LoadError as error:
        message, code = _one_line(error), 1
    except (ValueError, TypeError) as error:  # cachelimit's checks on the run's arguments, before any token
        message, code = _one_line(error), 2
    except SystemExit as exit_:  # --help and --version
        return exit_.code if isinstance(exit_.code, int) else 0
    except KeyboardInterrupt:
        print("\ncachelimit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `cachelimit generate ... | head`: stop quietly
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as error:
        if os.environ.get("CACHELIMIT_DEBUG"):
            raise
        message = f"{type(error).__name__}: {_one_line(error)} (set CACHELIMIT_DEBUG=1 for the traceback)"
        code = 1
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code
