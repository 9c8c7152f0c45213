"""Parameters from the command line: a YAML file, then `--set key=value`, `-p key value` or a flag per parameter,
validated by StudyParams; and the checks that need the model's files but not its weights (`preflight`)."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from .param_values import ParameterError
from .params import StudyParams

PARAMS_DIR = Path(__file__).resolve().parent.parent / "params"
GPU_DEFAULT_PARAMS = PARAMS_DIR / "reference-tiny.yaml"
CPU_DEFAULT_PARAMS = PARAMS_DIR / "cpu-smoke.yaml"


PAPERMILL_WORDS = {"True": True, "False": False, "None": None}


def parse_value(key: str, raw: str) -> Any:
    """A command-line value as papermill's -p reads one (True, False, None, an integer, then a number: 1e-4 is
    0.0001, where YAML would read text), else as YAML, so lists and lowercase booleans keep their types."""
    import yaml

    if key == "engines" and raw and not raw.lstrip().startswith("["):
        return [part.strip() for part in raw.split(",") if part.strip()]
    text = raw.strip()
    if text in PAPERMILL_WORDS:
        return PAPERMILL_WORDS[text]
    if any(ch.isdigit() for ch in text):  # not papermill's float('nan') or float('inf'): no parameter's value
        for number in (int, float):
            try:
                value = number(text)
            except ValueError:
                continue
            if number is int or math.isfinite(value):  # 1e999 overflows to inf: text, refused by its check
                return value
    try:
        return yaml.safe_load(raw) if text else ""
    except yaml.YAMLError as err:
        raise ParameterError(f"{key}: value {raw!r} is not valid YAML: {err}") from None


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` as --set takes it."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ParameterError(f"--set expects key=value, got {text!r}")
    return key.strip(), parse_value(key.strip(), raw)


def default_params_file() -> Path:
    import torch

    return GPU_DEFAULT_PARAMS if torch.cuda.is_available() else CPU_DEFAULT_PARAMS


def load_params(params_file: str | os.PathLike | None, overrides: dict | None = None) -> StudyParams:
    """The parameter file (or the defaults), then the overrides, validated once by StudyParams."""
    base = StudyParams.from_yaml(str(params_file)).to_dict() if params_file else {}
    source = f"{params_file or 'defaults'}" + (" with overrides" if overrides else "")
    return StudyParams.from_dict({**base, **(overrides or {})}, source=source)


def overrides_of(args) -> dict:
    values = {}
    for field in dataclasses.fields(StudyParams):
        raw = getattr(args, f"flag_{field.name}", None)
        if raw is not None:
            values[field.name] = parse_value(field.name, raw)
    values.update(dict(parse_override(text) for text in args.overrides))
    values.update({key: parse_value(key, raw) for key, raw in args.papermill_style})
    if getattr(args, "no_profile", False):
        values["profile"] = False
    return values


def _file_defaults(path: Path) -> dict:
    """A default parameter file's values over StudyParams's, read raw: help must not import torch to validate."""
    import yaml

    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        values = {}
    return {**StudyParams().to_dict(), "name": path.stem, **(values if isinstance(values, dict) else {})}


def _default_help(name: str, defaults: dict, with_file: bool) -> str:
    """What a parameter is when no flag sets it: `run` without a file takes a default file per device, `bench`
    StudyParams's defaults; either way a file given wins."""
    def shown(values: dict):
        return "auto" if values[name] is None else values[name]  # prompt_len

    if not with_file:
        return f"default: the parameter file's; without one, {shown(defaults['none'])}"
    cpu, gpu = shown(defaults["cpu"]), shown(defaults["gpu"])
    if cpu == gpu:
        return (f"default: the parameter file's; without one, {cpu} (in {CPU_DEFAULT_PARAMS.name} and "
                f"{GPU_DEFAULT_PARAMS.name})")
    return (f"default: the parameter file's; without one, {cpu} on CPU ({CPU_DEFAULT_PARAMS.name}), {gpu} with CUDA "
            f"({GPU_DEFAULT_PARAMS.name})")


def parameter_arguments(parser: argparse.ArgumentParser, default_file: bool = False) -> None:
    """default_file: the command runs a default parameter file where none is given (`run`)."""
    group = parser.add_argument_group("parameters (each validated by StudyParams; over the file, the flags per "
                                      "parameter, then --set, then -p: the later kind wins, within a kind the "
                                      "last given)")
    group.add_argument("--params", dest="params_option", default=None, metavar="FILE",
                       help="YAML parameter file (same as the positional argument)")
    group.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="set one parameter; repeatable")
    group.add_argument("-p", "--parameters", dest="papermill_style", nargs=2, action="append", default=[],
                       metavar=("KEY", "VALUE"), help="set one parameter, as papermill's -p does; repeatable")
    defaults = {"none": StudyParams().to_dict(), "cpu": _file_defaults(CPU_DEFAULT_PARAMS),
                "gpu": _file_defaults(GPU_DEFAULT_PARAMS)}
    for field in dataclasses.fields(StudyParams):
        group.add_argument("--" + field.name.replace("_", "-"), dest=f"flag_{field.name}", default=None,
                           metavar="V", help=_default_help(field.name, defaults, default_file))


def params_from(args) -> StudyParams:
    if args.params_option and args.params_file and args.params_option != args.params_file:
        raise ParameterError(f"two parameter files: {args.params_file!r} and --params {args.params_option!r}; "
                             "allowed: one (the positional argument or --params)")
    params_file = args.params_option or args.params_file
    return load_params(params_file, overrides_of(args))


def preflight(params: StudyParams, tokenizers: dict | None = None) -> None:
    """Checks that need the model's files but not its weights, done before any run starts: the tokenizer alone
    tells, in seconds, instead of a failure after a model load.

    Chat prompts need a tokenizer with a chat template (a local checkpoint may lack either); an explicit prompt_len
    must hold the longest of them, and the longest (or prompt_len) plus the new tokens must fit the model's
    positions. tokenizers: model -> tokenizer already read (a sweep's points share one per model).
    """
    from . import models
    from .param_values import model_positions
    from .workload import chat_rows, check_chat_prompt_len

    if params.prompts == "random" or params.is_synthetic:
        return
    tokenizers = {} if tokenizers is None else tokenizers
    if params.model not in tokenizers:
        tokenizers[params.model] = models.tokenizer_only(params)
    tokenizer = tokenizers[params.model]
    if tokenizer is None:
        if params.prompts == "chat":  # auto: random prompts, as the run will resolve them
            raise ParameterError(f"prompts: 'chat' needs a model with a tokenizer; {params.model} has none "
                                 "(allowed here: auto, random)")
        return
    if not getattr(tokenizer, "chat_template", None):
        raise ParameterError(f"prompts: {params.prompts!r} takes chat prompts from {params.model}, whose tokenizer has "
                             "no chat template; allowed here: random")
    _, rows = chat_rows(tokenizer, params.requests)
    longest = max(len(r) for r in rows)
    check_chat_prompt_len(params.prompt_len, longest)
    positions = model_positions(params.model)
    if positions is not None:
        params.check_positions(positions, longest_prompt=longest)
