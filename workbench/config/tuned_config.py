"""TunedConfig: what a production training script gets from a saved config.

A plain PyTorch script needs six things from a tuning session: the DataLoader arguments, the
data read as it was measured (``data_format``), the precision (an autocast context and, for
fp16, a GradScaler), the backend flags (TF32, cudnn.benchmark), the environment of its
processes (NCCL_* and allocator variables) and a launch line. Each is one method here, and
:meth:`apply` sets everything process-wide at once and says what it changed,
computed from the knobs the same way a burst computes it, so the script runs what was
measured. Beside the knobs, the workload's own code by name: its collate_fn (in
:meth:`dataloader`), its loss (:meth:`loss`) and its optimizer (:meth:`optimizer`).
With ``decode=gpu``, :meth:`dataloader` reads the stored bytes and :meth:`device_batches`
is the training loop's one call that decodes and augments them on the device, as the bursts
did (``workbench.config.device_decode`` says what was decided and why). With ``fp8``,
:meth:`convert_fp8` converts the model's Linear layers to float8 training as the bursts did.
``workbench.config.saved`` reads and writes the file.

Light imports: torch is imported inside the methods that need it, never at import time.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from workbench.config import changes as _changes
from workbench.config import device_decode, provenance
from workbench.config import marks as _marks
from workbench.config import model_setup as _model_setup
from workbench.config import nccl_suggestions as _suggestions
from workbench.config.changes import Change
from workbench.config.comm_suggestions import describe_comm
from workbench.config.names import FUNCTION_NAME, import_named
from workbench.config.yaml_text import ConfigError
from workbench.core import trusted
from workbench.core.allocconf import env_for
from workbench.core.errors import InputError
from workbench.core.knobs import DDP_KNOBS, Knobs
from workbench.core.loader_args import dataloader_kwargs
from workbench.core.nccl import flags as nccl_flags
from workbench.core.nccl import is_debug_only

__all__ = ["COLLATE_NAME", "LOADER_KEYS", "TRAINING_KEYS", "TunedConfig", "import_collate"]

LOADER_KEYS = ("batch_size", "num_workers", "pin_memory", "persistent_workers", "prefetch_factor")
"""The DataLoader arguments the knobs decide; the rest (shuffle, sampler, ...) is the script's."""
COLLATE_NAME = FUNCTION_NAME
"""How a saved config names a collate function: ``package.module:function``."""
TRAINING_KEYS = ("loss", "optimizer")
"""The ``training`` section: the workload's functions production calls by name."""
_LAUNCH_WORD = re.compile(r"^[\w$.:{}\[\]/-]+$")
_NNODES = re.compile(r"^(\d+(:\d+)?|\$\{?[A-Za-z_]\w*\}?)$")


@dataclass(frozen=True)
class TunedConfig:
    """Tuned knobs, the variables beside them, and where they came from."""

    knobs: Knobs
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables beside the NCCL knobs (PYTORCH_CUDA_ALLOC_CONF, ...)."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    """Device, versions, measurements and date of the burst that chose the knobs."""
    path: Path | None = field(default=None, compare=False)
    """The file it was loaded from, if any."""
    collate_fn: str | None = None
    """The workload's collate function, as ``module:function`` (not a knob: the measured
    pipeline's own code, imported by :meth:`dataloader`); None for torch's default collate."""
    comm: Mapping[str, Any] | None = None
    """A comm sweep's suggestions with their measured numbers (``workbench.analysis.
    comm_sweep``); not knobs: None when no sweep was saved with the config."""
    training: Mapping[str, str | None] | None = None
    """The workload's ``loss`` and ``optimizer`` as ``module:function`` (None: it had no
    importable name); None when saved without a workload (Knobs alone, schema 1-2 files)."""
    nccl_suggestions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """NCCL variables NCCL documents for debugging only (``workbench.core.nccl.DEBUG_ONLY``):
    name -> ``value``, ``source``, ``measured`` (``workbench.config.nccl_suggestions``). Never
    in :meth:`env` or the launch lines unless asked (``nccl_suggestions=True``). A debug-only
    variable among the knobs' ``nccl`` is moved here when the config is built."""

    def __post_init__(self) -> None:
        extra = MappingProxyType(dict(sorted(self.extra_env.items())))
        object.__setattr__(self, "extra_env", extra)
        suggestions = dict(self.nccl_suggestions)
        debug = {n: v for n, v in self.knobs.nccl.items() if is_debug_only(n)}
        if debug:  # a burst's experiment, not a production setting: kept as a suggestion
            kept = {n: v for n, v in self.knobs.nccl.items() if n not in debug}
            object.__setattr__(self, "knobs", self.knobs.replace(nccl=kept))
            for name, value in debug.items():
                made = _suggestions.from_knob(value, self.knobs, self.provenance)
                suggestions.setdefault(name, made)
        object.__setattr__(
            self, "nccl_suggestions", MappingProxyType(dict(sorted(suggestions.items())))
        )

    # -- applying -------------------------------------------------------------------------
    def apply(self, *, nccl_suggestions: bool = False, quiet: bool = False) -> list[Change]:
        """Set in this process everything process-wide the config holds; return what changed.

        The math switches (TF32 through both APIs) and cudnn.benchmark, as the bursts set them
        (:meth:`apply_backend_flags`), and the variables of :meth:`env` (NCCL, allocator,
        threads) in ``os.environ``, the config's value winning over one found. With
        ``nccl_suggestions`` the debug-only NCCL variables too (kind ``nccl-suggestion``).
        Call it first thing in the script: the allocator reads its variable when CUDA
        initializes and NCCL when the process group starts (a change set too late says so).

        Returns one :class:`~workbench.config.changes.Change` per switch or variable whose
        value it changed (found -> set), ``[]`` when nothing changed (a second call). Unless
        ``quiet``, prints that list on rank 0 (``workbench.config.changes.report`` says why
        print and not logging).
        """
        made = _changes.apply_changes(self.apply_backend_flags, self.env(),
                                      self._suggested(nccl_suggestions))  # fmt: skip
        if not quiet:
            _changes.report(made)
        return made

    def fresh_process_changes(self, *, nccl_suggestions: bool = False) -> list[Change]:
        """What :meth:`apply` would change in a fresh process (PyTorch's default switches, none
        of the variables set): a dry run that leaves this process as it found it."""
        return _changes.fresh_process_changes(self.apply_backend_flags, self.env(),
                                              self._suggested(nccl_suggestions))  # fmt: skip

    def _suggested(self, asked: bool) -> dict[str, str]:
        """The debug-only NCCL variables' values, when asked for."""
        return {n: str(s["value"]) for n, s in self.nccl_suggestions.items()} if asked else {}

    # -- the environment ------------------------------------------------------------------
    def env(self, *, nccl_suggestions: bool = False) -> dict[str, str]:
        """NCCL_* knobs and extra variables for the training processes, sorted by name; with
        ``nccl_suggestions`` the debug-only NCCL variables too (never without).

        A new dict: ``os.environ`` is never touched (:meth:`apply` sets them). NCCL reads its
        variables when a communicator is created and the CUDA allocator when torch initializes
        CUDA, so they belong in the launcher's environment (``export``,
        ``torchrun_command(with_env=True)``), or in ``os.environ`` early in the script, before
        any CUDA work or ``init_process_group``.
        """
        alloc = env_for(self.knobs.alloc_conf)  # the knob's allocator settings, both names
        every = {**self.knobs.nccl, **alloc, **self.extra_env, **self._suggested(nccl_suggestions)}
        return dict(sorted(every.items()))

    # -- data -------------------------------------------------------------------------------
    def dataloader_kwargs(self, device: str | None = None) -> dict[str, Any]:
        """The tuned DataLoader arguments on ``device`` ("cuda"/"cpu"; default: CUDA if present).

        The mapping a burst uses (``core.loader_args.dataloader_kwargs``), minus
        what a script chooses itself (shuffle, sampler, drop_last, worker timeout and start
        method). ``pin_memory`` is dropped without CUDA, where it cannot act.
        """
        full = dataloader_kwargs(self.knobs, _device_type(device))  # torch-free: load_config
        return {k: full[k] for k in LOADER_KEYS if k in full}

    def dataloader(
        self, dataset: Any, autotune: Any = False, *, device: Any = None, **overrides: Any
    ) -> Any:
        """A ``torch.utils.data.DataLoader`` over ``dataset`` with the tuned arguments.

        ``overrides`` win (``shuffle=True``, ``sampler=DistributedSampler(ds)``, ...). Setting
        ``num_workers=0`` also drops the tuned prefetch_factor and persistent_workers, which
        torch refuses without workers. The saved ``collate_fn`` (the workload's, as measured)
        is imported and passed unless overridden. ``device``: the training device the batches
        go to (default: CUDA when present); it decides ``pin_memory`` and whether
        ``decode=gpu`` can act.

        ``decode=gpu``: the workers read each sample's stored bytes and the loader yields
        ``EncodedBatch`` (``collate_fn=collate_encoded``); :meth:`device_batches` decodes and
        augments them on the device with the dataset's own transform. Where it cannot act (no
        CUDA device, a collate_fn of its own, a transform the device cannot run) the workers
        decode as with ``decode=cpu``, and a ConfigWarning says why
        (``workbench.config.device_decode`` has the whole design).

        ``autotune=True`` (or ``workbench.config.autotune.AutotuneOptions(...)``): a loader that
        starts from these values and refines workers and prefetch on the job's first batches,
        within a time cap, caching the answer for the next run (``workbench.config.autotune``).
        """
        if autotune is not False:
            from workbench.config.autotune import autotuned_loader  # torch-side: asked for

            where = {} if device is None else {"device": device}
            return autotuned_loader(self, dataset, autotune, {**overrides, **where})
        # torch only when the script asks for a loader: load_config stays torch-free
        from torch.utils.data import DataLoader

        kwargs = self.dataloader_kwargs(device)
        own = overrides.get("collate_fn", self.collate_fn)
        dataset, stored = device_decode.loader_dataset(
            self.knobs, dataset, _device_type(device), _collate_name(own)
        )
        if stored:
            # the engine's collate only for decode=gpu: load_config stays torch-free
            from workbench.engine.encoded import collate_encoded

            kwargs["collate_fn"] = collate_encoded
            if overrides.get("collate_fn", ...) is None:  # torch's default asked: bytes need ours
                overrides = {k: v for k, v in overrides.items() if k != "collate_fn"}
        elif self.collate_fn is not None and "collate_fn" not in overrides:
            kwargs["collate_fn"] = import_collate(self.collate_fn, self.path)
        if overrides.get("num_workers", kwargs["num_workers"]) == 0:
            for name in ("prefetch_factor", "persistent_workers"):
                kwargs.pop(name, None)
        kwargs.update(overrides)
        return DataLoader(dataset, **kwargs)

    def device_batches(
        self, loader: Iterable[Any], device: Any = None, *, seed: int | None = None,
        overlap: bool | None = None,
    ) -> Iterable[Any]:  # fmt: skip
        """The training loop's batches on ``device``: ``for x, y in cfg.device_batches(loader,
        device)``, once per epoch, as the loader itself.

        Over a loader of stored bytes (:meth:`dataloader` with ``decode=gpu``): the burst's
        ``DeviceBatches``, the same class with the same overlap, so the loop gets what was
        measured: each batch decoded (nvJPEG) and cropped, flipped and normalised on the device
        by the dataset's transform, float32 NCHW (NHWC with ``channels_last``), outside any
        autocast, one batch ahead on a side CUDA stream (``overlap``; None: the config's
        ``decode_overlap``, as the burst ran). The crops are drawn from
        ``seed``; by default from torch's generator and the rank (reproducible under
        ``torch.manual_seed``, different on each rank and on each call, so a call per epoch
        is as good as one). Over any other loader (``decode=cpu``, or
        decode=gpu where it could not act): its batches copied to the device, images NHWC
        with ``channels_last``. ``device``: default CUDA's current device, else the CPU, where
        the same decode and augmentation run on CPU tensors.
        """
        overlap = self.knobs.decode_overlap if overlap is None else overlap
        return device_decode.device_batches(loader, device, seed=seed, overlap=overlap,
                                            channels_last=self.knobs.channels_last)  # fmt: skip

    def dataset(
        self,
        source: str | os.PathLike[str],
        transform: Any = None,
        *,
        image_size: int | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> Any:
        """The ImageFolder ``source`` read the way the tuned bursts read it (``data_format``).

        The format is part of what was measured: samples/s read from predecoded pixels or one
        LMDB does not hold for a folder of JPEGs. ``files``: the folder itself (``ImageFiles``,
        ImageFolder's classes and order, a corrupt file named). ``shards``, ``lmdb``,
        ``predecoded``: the copy that ``workbench data --format F --from SOURCE`` built beside
        it (or under ``$WORKBENCH_FORMATS``), checked against its manifest and against the
        source's sample count (a stale copy is an error, not old data trained on silently); a
        copy not built is a KnobError with the command that builds it. ``image_size`` (the
        training crop) picks the predecoded copy's resolution (8/7 of it). Shards are an
        IterableDataset, shuffled per epoch and split by worker and, under DDP, by ``rank`` of
        ``world_size`` (as the bursts split them): give :meth:`dataloader` no ``shuffle`` and
        no ``sampler`` for them. The map-style formats ignore ``rank``: use a
        DistributedSampler, as with any dataset.
        """
        # torch and the format readers only when the script asks for data
        from workbench.engine import formats
        from workbench.engine.datasets import ImageFiles

        fmt, root = self.knobs.data_format, Path(source).expanduser()
        files = ImageFiles(root, transform)
        if fmt == "files":
            return files
        resolution = None
        if fmt == "predecoded":
            if not image_size:
                raise InputError("image_size: the training crop in pixels is needed to find "
                                 "the predecoded copy (224 for 224x224 crops)")  # fmt: skip
            resolution = formats.resolution_for(image_size)
        folder, _ = formats.checked_copy(root, fmt, resolution, len(files))
        dataset = formats.open_format(folder, fmt, transform)
        return dataset.for_rank(rank, world_size) if fmt == "shards" else dataset

    # -- precision ------------------------------------------------------------------------
    def autocast(self, device_type: str | None = None) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` for bf16/fp16; a no-op context for default, fp32-strict and tf32.

        tf32 and fp32-strict are not autocast dtypes: they are math modes of fp32 matmuls and
        convolutions, set by :meth:`apply_backend_flags`.
        """
        # torch only when the script asks for it: load_config stays torch-free
        import torch

        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.knobs.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=_device_type(device_type), dtype=dtype)

    def attention_context(
        self, device_type: str | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """``torch.nn.attention.sdpa_kernel`` with the tuned ``attention`` backend, as the
        bursts ran it: ``with cfg.attention_context(): train()`` (around the loop, or each
        step; torch.compile bakes the backend chosen when it traces). ``auto`` enables every
        backend (PyTorch's choice); ``flash``, ``efficient``, ``cudnn`` or ``math`` that one
        alone, so a model it cannot run fails as the bursts did. Where the tuned backend has no
        kernel (efficient or cudnn without CUDA) a RuntimeWarning says so and PyTorch chooses.
        ``device_type``: default CUDA when this machine has it."""
        # torch only when the script asks for it: load_config stays torch-free
        import torch

        from workbench.engine.attention import production_scope  # torch's SDPA switches

        return production_scope(self.knobs, torch.device(_device_type(device_type)))

    def pack(self, documents: Sequence[Any], seq_len: int) -> Any:
        """``documents`` (each a sequence or 1-D tensor of token ids) as the tuned ``packing``
        fed the bursts' model: a Dataset of ``(input, target)`` rows of ``seq_len``.
        ``pad``: one document a row, padded (``input["lengths"]`` real tokens); ``pack``:
        documents concatenated into full rows, ``input["docs"]`` the document of each
        position. Targets are the next token of the same document, -100 (``F.cross_entropy``'s
        ``ignore_index``) elsewhere. The model takes ``model(input["tokens"],
        docs=input.get("docs"))`` and, given ``docs``, attends through
        ``workbench.engine.documents.document_mask(docs)`` with positions from
        ``document_positions(docs)``, as the built-in gpt does. ``off``: an InputError (the
        bursts read no documents: nothing to pack)."""
        if self.knobs.packing == "off":
            raise InputError.not_allowed(
                "packing", "off", "pad or pack in the config to pack documents (its bursts read "
                "fixed windows of a token stream, no documents)",
            )  # fmt: skip
        # torch only when the script asks for it: load_config stays torch-free
        from workbench.engine.documents import documents_dataset

        return documents_dataset(documents, seq_len, self.knobs.packing)

    def convert_fp8(self, model: Any, device_type: str | None = None) -> Any:
        """``model`` with its Linear layers converted to float8 training as the bursts
        converted them (torchao's ``convert_to_float8_training`` with the tuned recipe, the
        same layers: all but the output head and those with a dimension not a multiple of 16),
        or ``model`` untouched with ``fp8=off``: ``model = cfg.convert_fp8(model)``, once, on
        its device, before DDP or FSDP and ``torch.compile`` wrap it; train under
        :meth:`autocast` (fp8 comes with ``precision=bf16``). In place, yet use what it returns
        (torchao replaces a bare Linear). Where the GPU has no float8 tensor cores (compute
        capability below 8.9, or no GPU) a RuntimeWarning says so and the model comes back as
        it was; without torchao a KnobError names ``fp8`` and the pip command. ``device_type``:
        default CUDA when this machine has it."""
        # torch only when the script asks for it: load_config stays torch-free
        import torch

        from workbench.engine.fp8 import production_convert  # torchao, where it converts

        return production_convert(model, self.knobs, torch.device(_device_type(device_type)))

    def grad_scaler(self, device_type: str | None = None) -> Any:
        """A ``torch.amp.GradScaler`` for fp16, whose narrow range underflows small gradients
        without loss scaling; None for every other precision."""
        if self.knobs.precision != "fp16":
            return None
        # torch only when the script asks for it: load_config stays torch-free
        import torch

        return torch.amp.GradScaler(_device_type(device_type))

    def apply_backend_flags(self) -> dict[str, Any]:
        """Set the math switches the knobs name, and nothing else; returns what it wrote
        (``{}`` when nothing: a config saved at the default knobs).

        ``tf32`` turns TF32 on for fp32 matmuls and cuDNN, ``fp32-strict`` off everywhere
        (both TF32 APIs kept coherent). ``default``, ``bf16`` and ``fp16`` write no math
        switch: the process keeps PyTorch's own math (fp32 matmuls IEEE, cuDNN convolutions
        TF32), or what the script set before; bf16/fp16 are autocast (:meth:`autocast`).
        ``cudnn_benchmark`` on turns cudnn.benchmark on; off leaves it as the process has it.
        Process-wide and left set: call it once at start-up.
        """
        # torch only when the script asks for it: load_config stays torch-free
        from workbench.engine.training import apply_backend_flags

        return apply_backend_flags(self.knobs)

    # -- distributed ----------------------------------------------------------------------
    def optimizer_kwargs(self) -> dict[str, bool]:
        """``foreach`` and ``fused`` for a torch.optim optimizer, as tuned (``optimizer_impl``):
        ``torch.optim.AdamW(model.parameters(), lr=3e-4, **cfg.optimizer_kwargs())``."""
        # torch only when the script asks for it: load_config stays torch-free
        from workbench.engine.memory_knobs import IMPL_ARGS

        foreach, fused = IMPL_ARGS[self.knobs.optimizer_impl]
        return {"foreach": foreach, "fused": fused}

    def loss(self) -> Callable[..., Any]:
        """The loss function the bursts trained with (``training.loss``), imported by name:
        ``loss_fn = cfg.loss(); loss_fn(model(x), y)``. ConfigError naming ``training.loss``
        when it was not saved or does not import here."""
        return self._training_function("loss")

    def optimizer(self, params: Iterable[Any]) -> Any:
        """The optimizer the bursts trained with, built on ``params`` by the saved factory
        (``training.optimizer``), with ``optimizer_impl`` (foreach/fused) applied as the bursts
        applied it: ``opt = cfg.optimizer(model.parameters())``. ConfigError naming
        ``training.optimizer`` when it was not saved or does not import here."""
        factory = self._training_function("optimizer")
        # torch only when the script asks for it: load_config stays torch-free
        from workbench.engine.memory_knobs import with_impl

        optimizer, _ = with_impl(factory(params), self.knobs.optimizer_impl)  # as in a burst
        return optimizer

    def _training_function(self, name: str) -> Callable[..., Any]:
        key = f"training.{name}"
        saved = (self.training or {}).get(name)
        if saved is None:
            raise ConfigError(self.path, key, f"not saved: {self._why_not_saved(name)}")
        return import_named(saved, key, self.path)

    def _why_not_saved(self, name: str) -> str:
        if self.provenance.get("trainer") == "lightning":
            return (f"a Lightning workload trained with its module's own training_step and "
                    f"configure_optimizers, not a {name} of the file's: "
                    f"lightning.Trainer(**cfg.lightning_trainer_kwargs()).fit(module, "
                    f"datamodule)")  # fmt: skip
        if self.training is None:
            return (f"this config was saved without its workload (Knobs alone, or a file from "
                    f"before schema 3); save_config(result, path) or save_config(knobs, path, "
                    f"workload=...) keeps the {name}, or pass your own")  # fmt: skip
        return (f"the workload's {name} had no name another process can import (a lambda, a "
                f"function defined inside another or in __main__, a callable object): pass "
                f"your own, or define it at the top level of a module and save again")  # fmt: skip

    def apply_activation_checkpointing(self, model: Any) -> int:
        """With ``activation_checkpointing`` tuned on, make the model's blocks recompute their
        activations in backward, as the bursts did (``workbench.engine.memory_knobs``: the
        model's own ``checkpoint_blocks()``, or ResNet/transformer blocks found by shape); call
        it before DDP and torch.compile. Returns the number of blocks (0 when the knob is off)."""
        if not self.knobs.activation_checkpointing:
            return 0
        # torch only when the script asks for it: load_config stays torch-free
        from workbench.engine.memory_knobs import apply_activation_checkpointing

        return apply_activation_checkpointing(model)

    def prepare_model(self, model: Any, device: Any = None, *, quiet: bool = False) -> Any:
        """The model set up as the bursts trained it, in their order: ``channels_last`` (a
        model with convolutions), activation checkpointing, the ranks' wrapper
        (:meth:`wrap_model`, in a job with ``torch.distributed`` initialized) and
        ``torch.compile`` (``workbench.config.model_setup``). Returns the model to train; what
        it changed is printed once (rank 0; ``quiet=True`` prints nothing) and is
        :meth:`model_changes`. Convert fp8 (:meth:`convert_fp8`) before; build the optimizer
        on the returned model's parameters after."""
        prepared, done = _model_setup.prepare(self, model, device)
        if not quiet:
            _model_setup.report(done, self.knobs)
        return prepared

    def model_changes(self) -> list[Change]:
        """What :meth:`prepare_model` changes, as data (a dry run, torch-free), with the loop's
        part: gradient accumulation (kind ``loop``)."""
        return _model_setup.planned(self.knobs)

    def ddp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``DistributedDataParallel(model, **cfg.ddp_kwargs())``.

        Every DDP knob a distributed burst passes to DDP (bucket_cap_mb,
        gradient_as_bucket_view, static_graph), named by the one list the burst's no-effect
        check uses too, so a DDP knob added there reaches production scripts as well.
        """
        return {name: getattr(self.knobs, name) for name in DDP_KNOBS}

    def fsdp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for FSDP2's ``fully_shard(block, **cfg.fsdp_kwargs())`` on each
        block, as the bursts sharded them: ``reshard_after_forward`` as tuned and ``mp_policy``
        (16-bit gathered parameters with fp32 gradient reduction for bf16/fp16, keep
        :meth:`autocast` around the forward; nothing for the fp32 precisions). The root takes
        ``reshard_after_forward=False``, PyTorch's default for it. :meth:`wrap_model` does
        all of it; ``workbench.engine.sharding`` says why each choice."""
        # torch only when the script asks for it: load_config stays torch-free
        from workbench.engine.sharding import mixed_precision

        return {
            "reshard_after_forward": self.knobs.reshard_after_forward,
            "mp_policy": mixed_precision(self.knobs.precision),
        }

    def wrap_model(self, model: Any, device: Any = None, *, mesh: Any = None) -> Any:
        """The model as the bursts trained it on several ranks, after
        ``torch.distributed.init_process_group``: with ``sharding=fsdp`` FSDP2's
        ``fully_shard`` on each block (the model's ``checkpoint_blocks()``, or its ResNet or
        transformer blocks found by shape, as Hugging Face models' decoder layers), then on
        the root, in place, returning the model; with ``ddp``
        ``DistributedDataParallel(model, **cfg.ddp_kwargs())``. ``device``: the rank's
        (default: CUDA's current device, else the CPU). ``mesh``: FSDP's data-parallel
        DeviceMesh (default: every rank of the default group).

        The order the bursts used: :meth:`apply_activation_checkpointing`, then this, then
        the optimizer (FSDP replaces the parameters: build it on ``model.parameters()``
        after), then ``torch.compile``. FSDP broadcasts nothing: build the model under the
        same seed on every rank, or load its weights, first. Under gradient accumulation
        FSDP reduce-scatters every micro-batch, as the bursts measured it (no ``no_sync``)."""
        # torch only when the script asks for it: load_config stays torch-free
        import torch

        from workbench.engine.sharding import ddp_model, shard_model  # torch's FSDP and DDP

        if not torch.distributed.is_initialized():
            raise InputError("wrap_model: no process group: call "
                             "torch.distributed.init_process_group() first (torchrun sets "
                             "its variables)")  # fmt: skip
        dev = _current_device(device)
        if self.knobs.sharding == "fsdp":
            return shard_model(model, self.knobs, dev, mesh)
        return ddp_model(model, self.knobs, dev)

    # -- Lightning ------------------------------------------------------------------------
    def lightning_trainer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``lightning.Trainer(**cfg.lightning_trainer_kwargs(), ...)``.

        ``precision``: bf16 -> ``"bf16-mixed"``, fp16 -> ``"16-mixed"`` (autocast, and for
        fp16 Lightning's own GradScaler, as a burst), default, fp32-strict and tf32 ->
        ``"32-true"`` (Lightning's fp32, which leaves torch's math switches alone). TF32 is not
        a Trainer setting: Lightning leaves the fp32 math mode to
        ``torch.set_float32_matmul_precision``, so call :meth:`apply_backend_flags` once at
        start-up (it writes TF32 on for tf32, off everywhere for fp32-strict, and nothing for
        default, bf16 and fp16, as the bursts ran).
        ``accumulate_grad_batches``: ``grad_accum``. ``benchmark``: ``cudnn_benchmark``.
        ``devices`` and ``num_nodes``: ``world_size`` split over ``nodes`` (one device when
        tuned on one: the Trainer's default would take every GPU), with a ``DDPStrategy``
        carrying the DDP knobs when there are several ranks, or with ``sharding=fsdp``
        Lightning's ``ModelParallelStrategy`` (FSDP2, no tensor parallelism), whose module
        shards itself in ``configure_model``: ``cfg.wrap_model(self.model,
        mesh=self.device_mesh["data_parallel"])``.

        The DataLoader knobs are not Trainer arguments: the DataModule builds the loader, so
        its ``train_dataloader`` takes them, ``cfg.dataloader(self.train_set, shuffle=True)``
        or ``DataLoader(self.train_set, shuffle=True, **cfg.dataloader_kwargs())``.
        ``compile`` and ``channels_last`` are the module's (``torch.compile(module)``,
        ``module.to(memory_format=torch.channels_last)``) before ``fit``.
        """
        knobs = self.knobs
        kwargs: dict[str, Any] = {
            "precision": _LIGHTNING_PRECISION.get(knobs.precision, "32-true"),
            "accumulate_grad_batches": knobs.grad_accum,
            "benchmark": knobs.cudnn_benchmark,
            "devices": knobs.world_size // knobs.nodes,
            "num_nodes": knobs.nodes,
        }
        if knobs.world_size > 1 and knobs.sharding == "fsdp":
            kwargs["strategy"] = _fsdp_strategy(knobs.world_size)
        elif knobs.world_size > 1:
            kwargs["strategy"] = _ddp_strategy(self.ddp_kwargs())
        return kwargs

    def torchrun_command(
        self,
        script: str,
        nnodes: int | str = 1,
        nproc_per_node: int | None = None,
        *,
        script_args: Sequence[str] = (),
        rdzv_endpoint: str = "$MASTER_ADDR:29500",
        rdzv_id: str = "$JOB_ID",
        rdzv_backend: str = "c10d",
        with_env: bool = False,
        nccl_suggestions: bool = False,
    ) -> str:
        """A torchrun line for ``script``, with world_size processes per node by default.

        One node uses ``--standalone``: a local rendezvous on a free port, nothing to set.
        Several nodes (``nnodes`` a count, a ``MIN:MAX`` range or a shell variable such as
        "$NNODES") use a c10d rendezvous: the same line runs on every node, and
        ``$MASTER_ADDR``/``$JOB_ID`` are left for the shell or the scheduler to fill in.
        ``with_env`` puts the config's variables in front (``NCCL_SOCKET_IFNAME=eth0 torchrun
        ...``); ``nccl_suggestions`` the debug-only NCCL variables (``NCCL_ALGO=Ring torchrun``).
        """
        nproc = self.knobs.world_size if nproc_per_node is None else nproc_per_node
        if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
            raise InputError.not_allowed("nproc_per_node", nproc, "an integer >= 1")
        words = ["torchrun"]
        if nnodes == 1:
            words += ["--standalone", f"--nproc_per_node={nproc}"]
        else:
            words += _rendezvous_words(nnodes, nproc, rdzv_backend, rdzv_endpoint, rdzv_id)
        words += [shlex.quote(str(a)) for a in (script, *script_args)]
        front = self.env(nccl_suggestions=nccl_suggestions) if with_env else {}
        front |= self._suggested(nccl_suggestions)
        return " ".join([f"{k}={shlex.quote(v)}" for k, v in sorted(front.items())] + words)

    def launch_lines(
        self, script: str = "train.py", *, nccl_suggestions: bool = False
    ) -> dict[str, Any]:
        """What a saved config's ``launch`` section shows, for the tuned shape: ``nodes`` (1
        until the knob exists) x ``world_size / nodes`` processes per node.

        ``single_node``: one node of it. ``multi_node``: the torchrun line for every node
        (``$NNODES`` when tuned on one node). ``srun``: the same agents started by SLURM, one
        task per node, inside an allocation. ``sbatch``: a minimal batch script (its lines)
        that exports the config's variables and runs the ``srun`` line. ``nccl_suggestions``
        puts the debug-only NCCL variables in each (left out by default).
        """
        nodes = _nodes(self.knobs)
        per_node = self.knobs.world_size // nodes
        asked = nccl_suggestions
        return {
            "single_node": self.torchrun_command(script, nproc_per_node=per_node,
                                                 nccl_suggestions=asked),
            "multi_node": self.torchrun_command(
                script, nnodes=nodes if nodes > 1 else "$NNODES", nproc_per_node=per_node,
                nccl_suggestions=asked,
            ),
            "srun": self.srun_command(script, nccl_suggestions=asked),
            "sbatch": self.sbatch_lines(script, nccl_suggestions=asked),
        }  # fmt: skip

    def srun_command(
        self,
        script: str = "train.py",
        nnodes: int | str = "$SLURM_NNODES",
        *,
        nccl_suggestions: bool = False,
    ) -> str:
        """``srun`` starting one torchrun agent per node of the allocation (``--export=ALL``:
        the exported variables reach every rank; ``--kill-on-bad-exit=1``: one failed node ends
        the step instead of leaving the others waiting in a collective). ``nccl_suggestions``
        sets the debug-only NCCL variables in front of srun, which exports them with the rest."""
        per_node = self.knobs.world_size // _nodes(self.knobs)
        torchrun = self.torchrun_command(script, nnodes=nnodes, nproc_per_node=per_node,
                                         rdzv_id="$SLURM_JOB_ID")  # fmt: skip
        front = [f"{k}={shlex.quote(v)}" for k, v in self._suggested(nccl_suggestions).items()]
        return " ".join([*front, f"srun --nodes={nnodes} --ntasks-per-node=1 --kill-on-bad-exit=1 "
                         f"--export=ALL {torchrun}"])  # fmt: skip

    def sbatch_lines(
        self,
        script: str = "train.py",
        *,
        gpu_line: bool | None = None,
        nccl_suggestions: bool = False,
    ) -> list[str]:
        """A minimal ``sbatch`` script for the tuned shape, one line per entry.

        ``gpu_line`` (``#SBATCH --gpus-per-node``): None asks for GPUs unless the config comes
        from a CPU (``provenance.device``), whose processes ran on no GPU; True or False decide.
        ``nccl_suggestions`` exports the debug-only NCCL variables too.
        """  # fmt: skip
        nodes = _nodes(self.knobs)
        per_node = self.knobs.world_size // nodes
        env = self.env(nccl_suggestions=nccl_suggestions)
        exports = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        gpus = not self.from_cpu() if gpu_line is None else gpu_line
        return [
            "#!/bin/bash",
            "#SBATCH --job-name=workbench-tuned",
            f"#SBATCH --nodes={nodes}",
            "#SBATCH --ntasks-per-node=1",
            *([f"#SBATCH --gpus-per-node={per_node}"] if gpus else []),
            *exports,
            'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            self.srun_command(script),
        ]

    # -- provenance -----------------------------------------------------------------------
    def from_cpu(self) -> bool:
        """Whether the knobs were measured (or saved alone) on a CPU: no GPU to ask for."""
        kind = ((self.provenance.get("device") or {}).get("type") or "").split(":")[0]
        return kind == "cpu"

    def machine_differences(self, here: Mapping[str, Any] | None = None) -> list[str]:
        """What differs between the tuning machine and this one (GPU model, torch major)."""
        return provenance.differences(self.provenance, here or provenance.current_machine())

    def describe(self, script: str = "train.py", *, nccl_suggestions: bool = False) -> str:
        """What ``workbench show`` prints: env exports, what :meth:`apply` changes in a fresh
        process, DataLoader kwargs, torchrun lines, and the NCCL suggestions with their figures
        (in the exports and launch lines only with ``nccl_suggestions``)."""
        loader = ", ".join(f"{k}={v!r}" for k, v in self.dataloader_kwargs("cuda").items())
        if self.collate_fn is not None:
            loader += f", collate_fn={self.collate_fn.replace(':', '.')}"
        elif self.knobs.decode == "gpu":
            loader += ", collate_fn=workbench.engine.encoded.collate_encoded"
        flags = nccl_flags(self.env(nccl_suggestions=nccl_suggestions))
        env = self.env(nccl_suggestions=nccl_suggestions)
        powers = trusted.powers(env)  # a config is trusted input: say what these can do
        exports = []
        for name, value in env.items():
            exports += [f"# note: {name}: {flags[name]}"] if name in flags else []
            exports += [f"# trusted input: {name}: {powers[name]}"] if name in powers else []
            exports.append(f"export {name}={shlex.quote(value)}")
        launch = self.launch_lines(script, nccl_suggestions=nccl_suggestions)
        applied = self.fresh_process_changes(nccl_suggestions=nccl_suggestions)
        return "\n".join(
            [
                f"# {self.path or 'config'}: {provenance.summary(self.provenance)}",
                *_marks.uncertain_lines(self.provenance),
                *self._workload_lines(),
                "# environment of the training processes (export before launching)",
                *(exports or ["# (nothing to export)"]),
                "# what cfg.apply() changes in a fresh process (PyTorch's defaults, no variable "
                "set)",
                *(f"  {line}" for line in _changes.format_changes(applied)),
                "# DataLoader keyword arguments (cfg.dataloader(dataset) passes them)",
                f"DataLoader(dataset, {loader})",
                *self._data_lines(),
                *self._model_lines(),
                *self._training_lines(),
                *self._attention_lines(),
                *self._packing_lines(),
                *self._fp8_lines(),
                *self._sharding_lines(),
                "# one node",
                launch["single_node"],
                "# several nodes: run on every node with NNODES, MASTER_ADDR and JOB_ID set",
                launch["multi_node"],
                "# SLURM, inside an allocation (salloc) with MASTER_ADDR set: one agent per node",
                launch["srun"],
                "# SLURM batch script (save as train.sbatch; sbatch train.sbatch)",
                *launch["sbatch"],
                *(describe_comm(self.comm) if self.comm else []),
                *_suggestions.describe_suggestions(self.nccl_suggestions),
            ]
        )

    def _decode_lines(self) -> list[str]:
        """The production snippet for ``decode=gpu``; with the workload's own collate_fn, why it
        has no effect (as in the bursts)."""
        if self.knobs.decode != "gpu":
            return []
        if self.collate_fn is not None:
            return [f"# data: decode=gpu has no effect with the workload's own collate_fn "
                    f"({self.collate_fn}), which the device pipeline would bypass: the workers "
                    "decode (decode=cpu), as in the bursts"]  # fmt: skip
        return list(_DECODE_LINES)

    def _model_lines(self) -> list[str]:
        """The model set up as the bursts trained it: the call, and what it changes here."""
        lines = ["# the model as the bursts trained it (before building the optimizer)",
                 "model = cfg.prepare_model(model)"]  # fmt: skip
        changes = self.model_changes()
        lines += [f"#   {c}" for c in changes] or ["#   (nothing to change with these knobs)"]
        return lines

    def _training_lines(self) -> list[str]:
        """The workload's training functions by name, where the file has them; for a Lightning
        workload the Trainer line (its module's own training_step and optimizers trained)."""
        if self.provenance.get("trainer") == "lightning":
            return self._lightning_lines()
        if self.training is None:
            return []
        calls = {"loss": "loss_fn = cfg.loss()", "optimizer": "optimizer = cfg.optimizer(params)"}
        workload = self.provenance.get("workload")
        lines = ["# the workload's loss and optimizer" + (f" ({workload})" if workload else "")]
        for name in TRAINING_KEYS:
            saved = self.training.get(name)
            lines.append(f"{calls[name]}  # {saved}" if saved else
                         f"# {name}: not saved (no importable name): pass your own")  # fmt: skip
        return lines

    def _lightning_lines(self) -> list[str]:
        """The Trainer line with what ``lightning_trainer_kwargs`` gives (its strategy named,
        not built: show imports no lightning)."""
        k = self.knobs
        words = [f"precision={_LIGHTNING_PRECISION.get(k.precision, '32-true')!r}",
                 f"accumulate_grad_batches={k.grad_accum}", f"benchmark={k.cudnn_benchmark}",
                 f"devices={k.world_size // k.nodes}", f"num_nodes={k.nodes}"]  # fmt: skip
        if k.world_size > 1:
            words.append("strategy=" + ("ModelParallelStrategy" if k.sharding == "fsdp"
                                        else "DDPStrategy(**cfg.ddp_kwargs())"))  # fmt: skip
        workload = self.provenance.get("workload")
        return [f"# a Lightning workload{f' ({workload})' if workload else ''}: its own "
                "training_step and configure_optimizers trained (no loss or optimizer saved)",
                "trainer = lightning.Trainer(**cfg.lightning_trainer_kwargs())",
                f"#   = Trainer({', '.join(words)})",
                "# the DataModule's train_dataloader: cfg.dataloader(self.train_set, "
                "shuffle=True)"]  # fmt: skip

    def _workload_lines(self) -> list[str]:
        """Where the file names a Workload object no other process can rebuild, it says so."""
        if self.provenance.get("workload_importable") is not False:
            return []
        name = self.provenance.get("workload")
        return [f"# workload {name!r}: no other process can rebuild it by this name (a "
                "Workload object's, or registered in one process only); `workbench burst/tune "
                "--workload` needs a module:function returning it"]  # fmt: skip

    def _attention_lines(self) -> list[str]:
        """How the tuned attention kernel is kept in production, where one was chosen."""
        if self.knobs.attention == "auto":
            return []
        return [f"# attention: measured with scaled_dot_product_attention on the "
                f"{self.knobs.attention} kernel alone (torch.nn.attention.sdpa_kernel)",
                "with cfg.attention_context():  # around the training loop",
                "    ..."]  # fmt: skip

    def _packing_lines(self) -> list[str]:
        """How the measured documents are fed in production, where they were."""
        how = {
            "pad": "one document a row, padded to the sequence length",
            "pack": "documents packed into full rows, a document mask keeping them apart",
        }
        if self.knobs.packing not in how:
            return []
        return [f"# packing: measured with {how[self.knobs.packing]}; tokens_per_s counted "
                "real tokens only",
                "dataset = cfg.pack(documents, seq_len)  # rows (input, target) as measured",
                "logits = model(input['tokens'], docs=input.get('docs'))  # mask: "
                "workbench.engine.documents.document_mask"]  # fmt: skip

    def _sharding_lines(self) -> list[str]:
        """How the measured sharding is kept in production, where it was FSDP's."""
        k = self.knobs
        if k.sharding != "fsdp":
            return []
        kept = "freed after each block's forward" if k.reshard_after_forward else (
            "kept from each block's forward to its backward")  # fmt: skip
        return [f"# sharding: measured with FSDP2 (fully_shard per block, then the root; "
                f"gathered parameters {kept}: reshard_after_forward={k.reshard_after_forward})",
                "model = cfg.wrap_model(model)  # after init_process_group and activation "
                "checkpointing; build the optimizer after it"]  # fmt: skip

    def _fp8_lines(self) -> list[str]:
        """How the tuned float8 training is kept in production, where it was on."""
        if self.knobs.fp8 == "off":
            return []
        return [f"# fp8: measured with the Linear layers in float8 (torchao, {self.knobs.fp8} "
                "recipe; not the output head), under bf16 autocast",
                "model = cfg.convert_fp8(model)  # before DDP and torch.compile"]  # fmt: skip

    def _data_lines(self) -> list[str]:
        """How the measured data was read, where that is not the plain folder of files."""
        k, lines = self.knobs, []
        if k.data_format != "files":
            lines += [f"# data: measured reading the {k.data_format} copy of the image folder "
                      f"(workbench data --format {k.data_format} --from DIR builds it); read the "
                      "same in production: dataset = cfg.dataset(DIR, transform)"]  # fmt: skip
        lines += self._decode_lines()
        if k.cache == "cold":
            lines += ["# data: measured with a cold page cache (every read from the disk, none "
                      "from RAM): a dataset that fits in RAM reads faster after its first "
                      "epoch"]  # fmt: skip
        return lines


_DECODE_LINES = [
    "# data: decode=gpu: the workers read the stored bytes (JPEG files, shard or LMDB records, "
    "predecoded pixels), the device decodes (nvJPEG) and crops, flips and normalizes, one batch "
    "ahead, as the bursts measured; on a machine without CUDA the workers decode, with a warning",
    "loader = cfg.dataloader(dataset, shuffle=True)  # dataset: yours, with its training transform",
    "for images, labels in cfg.device_batches(loader, device):  # float32 NCHW on the device",
    "    ...  # the training step, as with any loader",
]
"""What ``workbench show`` prints for ``decode=gpu``: the loader and the one call in the loop."""


def _collate_name(collate: Any) -> str | None:
    """A collate function as a person reads it (its saved name, or its own); None for none."""
    if collate is None or isinstance(collate, str):
        return collate
    return getattr(collate, "__qualname__", None) or repr(collate)


def import_collate(name: str, path: Path | str | None = None) -> Any:
    """The function a saved ``dataloader.collate_fn`` names (``module:function``)."""
    return import_named(name, "dataloader.collate_fn", path)


_LIGHTNING_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed"}
"""Lightning's precision names for the autocast precisions; every fp32 mode (default,
fp32-strict, tf32) is "32-true": the math mode is :meth:`TunedConfig.apply_backend_flags`'s."""


def _ddp_strategy(ddp_kwargs: dict[str, Any]) -> Any:
    """Lightning's DDPStrategy with the tuned DDP arguments (a plain "ddp" would drop them)."""
    try:
        from lightning.pytorch.strategies import DDPStrategy  # asked for: load_config stays light
    except ImportError:
        from pytorch_lightning.strategies import DDPStrategy  # the older package name
    return DDPStrategy(**ddp_kwargs)


def _fsdp_strategy(world_size: int) -> Any:
    """Lightning's ``ModelParallelStrategy`` (FSDP2) over every rank, no tensor parallelism:
    the module's ``configure_model`` shards itself, ``cfg.wrap_model(self.model,
    mesh=self.device_mesh["data_parallel"])``, as the bursts sharded it."""
    try:
        from lightning.pytorch.strategies import ModelParallelStrategy  # asked for: stays light
    except ImportError:
        from pytorch_lightning.strategies import ModelParallelStrategy  # the older package name
    return ModelParallelStrategy(data_parallel_size=world_size, tensor_parallel_size=1)


def _rendezvous_words(
    nnodes: int | str, nproc: int, backend: str, endpoint: str, rdzv_id: str
) -> list[str]:
    ok_count = isinstance(nnodes, int) and not isinstance(nnodes, bool) and nnodes >= 1
    if not ok_count and not (isinstance(nnodes, str) and _NNODES.match(nnodes)):
        raise InputError.not_allowed(
            "nnodes", nnodes, "an integer >= 1, MIN:MAX, or a variable like $NNODES"
        )
    for name, word in (
        ("rdzv_backend", backend),
        ("rdzv_endpoint", endpoint),
        ("rdzv_id", rdzv_id),
    ):
        if not isinstance(word, str) or not _LAUNCH_WORD.match(word):
            raise InputError.not_allowed(
                name, word, "one word of letters, digits and $ . : / _ - { } [ ]"
            )
    return [
        f"--nnodes={nnodes}",
        f"--nproc_per_node={nproc}",
        f"--rdzv_backend={backend}",
        f"--rdzv_endpoint={endpoint}",
        f"--rdzv_id={rdzv_id}",
    ]


def _nodes(knobs: Knobs) -> int:
    """The ``nodes`` knob; 1 where this workbench has none yet."""
    return int(getattr(knobs, "nodes", 1) or 1)


def _current_device(device: Any) -> Any:
    """A rank's torch device: ``device`` as given, else CUDA's current device, else the CPU."""
    # torch only when the script asks for it: load_config stays torch-free
    import torch

    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _device_type(device: str | None) -> str:
    """ "cuda" or "cpu" from a device string; None: CUDA when this machine has it."""
    if device is not None:
        return str(device).split(":")[0]
    # torch only when the script asks for it: load_config stays torch-free
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
