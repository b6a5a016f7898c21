"""DP-SGD with the patient as the privacy unit (DESIGN.md §6).

A patient who contributes ``m`` sequences to a sequence-level DP-SGD run gets roughly ``m``
times the ε printed for a sequence (group privacy). phisieve's ``--dp`` therefore samples,
clips and accounts **patients** (user-level sampling: McMahan et al. 2018; Charles et al.
2024, "Fine-tuning LLMs with user-level DP"; Chua et al. 2024, "Mind the privacy unit!"):

1. each step takes every patient independently with probability ``q`` (Poisson sampling by a
   keyed draw of the step and the patient);
2. of each sampled patient, up to ``m`` sequences (a keyed draw per step);
3. the patient's gradient is the mean of the gradients of those sequences' losses
   (per-sequence gradients from Opacus' :class:`~opacus.grad_sample.GradSampleModule`,
   summed per patient), clipped to norm ``C``;
4. the clipped patient gradients are summed, Gaussian noise of standard deviation ``σC`` is
   added to every coordinate, and the sum is divided by the expected number of patients per
   step ``qN`` before the optimizer sees it;
5. the accountant (Opacus' RDP or PRV) composes the subsampled Gaussian mechanism over the
   steps with sampling rate ``q`` over the ``N`` patients: the ε it reports holds for a
   patient's whole record in this training set (add or remove one patient), at δ, by
   default ``1/N^1.1`` (δ ≥ 1/N is refused: at δ = 1/N a mechanism that publishes one random
   patient's notes whole satisfies the definition).

``unit="sequence"`` keeps the sequence-level mode (each sequence its own unit, at most ``m``
of a patient's sequences in the training set), and reports the patient's guarantee it
implies by group privacy over ``m`` (:func:`group_epsilon`), labelled as such.

The sampling and the noise are keyed by a secret (``--secret-file``): whoever knows the key
and the data can recompute the noise, so without one they come from fresh OS randomness and
the run cannot be repeated; with one, the same key and seed give the same model bytes
whatever the number of loader workers. The loss log (``metrics.jsonl``) is not private.
"""

from __future__ import annotations

import hashlib
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ..dependencies import require
from ..errors import ConfigError
from .sparse_head import SparseHead

UNITS = ("patient", "sequence")
ACCOUNTANTS = ("rdp", "prv")
DELTA_EXPONENT = 1.1
"""The default δ is ``1 / N ** DELTA_EXPONENT`` for ``N`` patients."""


@dataclass
class DPConfig:
    """DP-SGD settings (the patient is the privacy unit unless ``unit="sequence"``).

    ``noise_multiplier`` (σ) defaults to the one that reaches ``target_epsilon`` over the
    planned steps, or to 1.0 without a target; ``delta`` to ``1 / N ** 1.1`` for the ``N``
    patients trained on. ``secret`` keys the Poisson sampling and the noise (``None``: fresh
    OS randomness, not recorded, so the run cannot be repeated).
    """

    noise_multiplier: float | None = None
    max_grad_norm: float = 1.0
    max_per_patient: int | None = 50
    delta: float | None = None
    secure_mode: bool = False
    """Noise as the sum of four Gaussian draws (the defence of Opacus' secure mode against
    floating-point attacks on the Gaussian sampler): slower; use it for a model you release."""
    unit: str = "patient"
    target_epsilon: float | None = None
    accountant: str = "rdp"
    max_physical_batch: int = 64
    """Sequences per forward pass (memory only: the step's result does not depend on it
    beyond floating-point rounding)."""
    secret: bytes | None = None


def check_config(dp: DPConfig) -> None:
    """Refuse settings that cannot give a guarantee (before any data is read)."""
    if dp.unit not in UNITS:
        raise ConfigError(f"the DP unit is patient or sequence, not {dp.unit!r}")
    if dp.accountant not in ACCOUNTANTS:
        raise ConfigError(f"the accountant is rdp or prv, not {dp.accountant!r}")
    if not dp.max_grad_norm > 0:
        raise ConfigError(f"the clipping norm must be positive, not {dp.max_grad_norm}")
    if dp.noise_multiplier is not None and not dp.noise_multiplier >= 0:
        raise ConfigError(f"the noise multiplier must be >= 0, not {dp.noise_multiplier}")
    if dp.noise_multiplier is not None and dp.target_epsilon is not None:
        raise ConfigError("give a noise multiplier or a target ε, not both")
    if dp.target_epsilon is not None and not dp.target_epsilon > 0:
        raise ConfigError(f"the target ε must be positive, not {dp.target_epsilon}")
    if dp.max_per_patient is not None and dp.max_per_patient < 1:
        raise ConfigError(f"max_per_patient must be at least 1, not {dp.max_per_patient}")
    if dp.unit == "sequence" and dp.max_per_patient is None:
        raise ConfigError(
            "the sequence-level mode needs a cap on sequences per patient (max_per_patient): "
            "without one no patient-level guarantee follows"
        )
    if dp.max_physical_batch < 1:
        raise ConfigError(f"max_physical_batch must be at least 1, not {dp.max_physical_batch}")
    if dp.delta is not None and not 0 < dp.delta < 1:
        raise ConfigError(f"δ must be in (0, 1), not {dp.delta}")


def default_delta(patients: int) -> float:
    """``1 / N ** 1.1``: well below ``1/N``, as DP practice asks."""
    return 1.0 / max(2, patients) ** DELTA_EXPONENT


def check_delta(delta: float, patients: int) -> None:
    """Refuse ``δ >= 1/N``: at δ = 1/N, publishing one random patient's record whole is
    (0, δ)-DP, so such a δ promises nothing."""
    bound = 1.0 / max(1, patients)
    if delta >= bound:
        raise ConfigError(
            f"δ = {delta:.6g} is not below 1/N = {bound:.6g} for the N = {patients} patients "
            f"trained on: such a δ allows publishing a patient's notes whole; use δ < 1/N "
            f"(default 1/N^{DELTA_EXPONENT:g} = {default_delta(patients):.3g})"
        )


def opacus_version() -> str:
    try:
        return metadata.version("opacus")
    except metadata.PackageNotFoundError:  # pragma: no cover - a torch extra
        return "unknown"


def _accountant(name: str) -> Any:
    require("opacus")
    from opacus.accountants import create_accountant

    return create_accountant(mechanism=name)


def epsilon(sigma: float, q: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    """ε of ``steps`` compositions of the Poisson-subsampled Gaussian mechanism (rate ``q``,
    noise multiplier ``sigma``) at ``delta``, by Opacus' accountant ``accountant``
    (``inf`` without noise; 0 without a step)."""
    return epsilon_curve(sigma, q, steps, accountant)(delta)


def epsilon_curve(
    sigma: float, q: float, steps: int, accountant: str = "rdp"
) -> Callable[[float], float]:
    """δ ↦ ε for one mechanism (:func:`epsilon`), computed once: the RDP curve is composed
    once and converted at each δ (what Opacus' RDP accountant does for one δ); the PRV
    accountant is asked at each δ."""
    if steps <= 0 or q <= 0:
        return lambda delta: 0.0
    if sigma <= 0:
        return lambda delta: math.inf
    acc = _accountant(accountant)
    acc.history = [(float(sigma), float(q), int(steps))]
    if accountant == "rdp":
        from opacus.accountants.analysis import rdp as analysis

        orders = acc.DEFAULT_ALPHAS
        rdp = analysis.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)

        def at(delta: float) -> float:
            eps, _ = analysis.get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
            return float(eps)

        return at

    def ask(delta: float) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(acc.get_epsilon(delta=delta))

    return ask


def noise_for_epsilon(
    target: float, q: float, steps: int, delta: float, accountant: str = "rdp"
) -> float:
    """The smallest noise multiplier (to Opacus' tolerance, 0.01 in ε) whose ε over
    ``steps`` at rate ``q`` is at most ``target`` at ``delta``."""
    require("opacus")
    from opacus.accountants.utils import get_noise_multiplier

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(
                get_noise_multiplier(
                    target_epsilon=target,
                    target_delta=delta,
                    sample_rate=q,
                    steps=max(1, steps),
                    accountant=accountant,
                )
            )
    except ValueError as e:
        raise ConfigError(
            f"no noise multiplier reaches ε = {target:g} at δ = {delta:.3g} over {steps} steps "
            f"at sampling rate {q:.4g}: take fewer steps or a larger target"
        ) from e


def group_epsilon(
    eps_at: Callable[[float], float], group: int, delta: float, points: int = 400
) -> tuple[float, float]:
    """The (ε, δ) that group privacy gives a group of ``group`` units when each unit has the
    guarantee ``(eps_at(δ_u), δ_u)`` for every δ_u: ``(k ε_u, k e^{(k-1) ε_u} δ_u)`` for
    ``k = group`` (Dwork & Roth, Thm 2.2 generalised), with δ_u chosen on a log grid as the
    one that gives the smallest group ε whose group δ is at most ``delta``.

    Returns
    -------
    (epsilon, delta)
        ``(inf, delta)`` when no δ_u on the grid reaches ``delta``.
    """
    k = max(1, int(group))
    if k == 1:
        return eps_at(delta), delta
    best = (math.inf, delta)
    top = math.log(delta / k)
    for i in range(points):
        log_du = top - 0.25 * i  # down to δ/k · e^-100
        eps_u = eps_at(math.exp(log_du))
        if not math.isfinite(eps_u):
            continue
        log_dg = math.log(k) + (k - 1) * eps_u + log_du
        if log_dg <= math.log(delta) and k * eps_u < best[0]:
            best = (k * eps_u, math.exp(log_dg))
    return best


def _key(secret: bytes, what: str) -> int:
    """A 63-bit key for ``what`` (sampling, noise) derived from the secret."""
    digest = hashlib.sha256(b"phisieve-dp-v1\x00" + what.encode() + b"\x00" + secret).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def run_secret(dp: DPConfig) -> tuple[bytes, str]:
    """The secret that keys this run's sampling and noise, and how it was obtained
    (``"key"``: given, the run can be repeated; ``"fresh"``: OS randomness, never recorded)."""
    if dp.secret is not None:
        return dp.secret, "key"
    return os.urandom(32), "fresh"


def sampling_key(secret: bytes) -> int:
    """The key of the Poisson draws (:class:`~phisieve.training.loaders.PoissonSteps`)."""
    return _key(secret, "sampling")


def noise_key(secret: bytes) -> int:
    """The seed of the noise generator (:class:`PrivateGradient`)."""
    return _key(secret, "noise")


def plan_dp(encoded: str | Path, obj: Any, cfg: Any) -> dict[str, Any]:
    """What a DP-SGD run of ``cfg`` (a :class:`~phisieve.training.loop.TrainConfig` with
    ``dp``) will do, checked before any step: the steps' data
    (:class:`~phisieve.training.loaders.PoissonSteps`), N, q, δ, σ, the planned steps, and
    the keys of the sampling and the noise."""
    from .loaders import PoissonSteps

    dp = cfg.dp
    assert dp is not None
    check_config(dp)
    if dp.unit == "sequence" and dp.target_epsilon is not None:
        raise ConfigError(
            "--target-epsilon is a patient's ε; with --dp-unit sequence the patient's ε comes "
            "from group privacy over --max-per-patient: choose --noise-multiplier instead"
        )
    secret, randomness = run_secret(dp)
    data = PoissonSteps(
        encoded,
        obj.name,
        unit=dp.unit,
        key=sampling_key(secret),
        seed=cfg.seed,
        max_per_patient=dp.max_per_patient,
        masking=cfg.masking,
        causal=obj.causal,
        pad_to=cfg.pad_to,
        allow_unprotected=cfg.allow_unprotected,
    )
    if not data.units:
        raise ConfigError("DP-SGD: the encoded dataset holds no sequence")
    patients = data.patients
    delta = dp.delta if dp.delta is not None else default_delta(patients)
    check_delta(delta, patients)
    q = min(1.0, cfg.batch_size / data.units)
    steps_per_epoch = max(1, math.ceil(data.units / cfg.batch_size))
    planned = cfg.max_steps or cfg.epochs * steps_per_epoch
    if dp.target_epsilon is not None:
        sigma = noise_for_epsilon(dp.target_epsilon, q, planned, delta, dp.accountant)
    else:
        sigma = 1.0 if dp.noise_multiplier is None else dp.noise_multiplier
    data.sample_rate, data.steps = q, planned
    return {
        "data": data,
        "noise_seed": noise_key(secret),
        "unit": dp.unit,
        "patients": patients,
        "units": data.units,
        "sequences": data.sequences,
        "delta": delta,
        "sample_rate": q,
        "expected_units_per_step": q * data.units,
        "steps_per_epoch": steps_per_epoch,
        "planned_steps": planned,
        "noise_multiplier": sigma,
        "target_epsilon": dp.target_epsilon,
        "max_grad_norm": dp.max_grad_norm,
        "max_per_patient": dp.max_per_patient,
        "accountant": dp.accountant,
        "accountant_version": f"opacus {opacus_version()}",
        "secure_mode": dp.secure_mode,
        "max_physical_batch": dp.max_physical_batch,
        "randomness": randomness,
    }


GUARANTEE = (
    "(ε, δ)-DP for each patient: adding or removing one patient's whole record in this "
    "training set; not the base model's pretraining data, a tokenizer learnt on these "
    "patients, nor the choice of hyper-parameters"
)


def dp_summary(plan: dict[str, Any], steps: int) -> dict[str, Any]:
    """``train.json``'s ``dp``: the patient's (ε, δ) after ``steps`` steps, and how."""
    sigma, q, delta = plan["noise_multiplier"], plan["sample_rate"], plan["delta"]
    eps_at = epsilon_curve(sigma, q, steps, plan["accountant"])

    out = {k: v for k, v in plan.items() if k not in ("data", "noise_seed")}
    out["steps"] = steps
    out["guarantee"] = GUARANTEE
    if plan["unit"] == "patient":
        eps = eps_at(delta)
        out["patient_epsilon_by"] = "accountant (patients sampled and clipped)"
    else:
        m = plan["max_per_patient"]
        out["sequence"] = {"epsilon": _finite_or_none(eps_at(delta)), "delta": delta}
        eps, delta = group_epsilon(eps_at, m, delta)
        out["patient_epsilon_by"] = f"group privacy over at most {m} sequences per patient"
    out["epsilon"], out["delta"] = _finite_or_none(eps), delta
    if out["epsilon"] is None:
        out["guarantee"] = "none: no noise (σ = 0), so no finite ε"
    return out


def _finite_or_none(x: float) -> float | None:
    """``x``, or ``None`` for an infinite ε (JSON has no infinity)."""
    return x if math.isfinite(x) else None


def freeze_for_dp(model: Any) -> list[str]:
    """Freeze what per-sample gradients should not cover: every embedding table (token
    embeddings are tied to the output layer in BERT and GPT-2, and hold one row per word of
    the vocabulary), the output layer tied to them, and parameters held directly by a module
    that has sub-modules and no per-sample gradient rule in Opacus (BERT's output bias, which
    would make Opacus differentiate the whole head per sample). A leaf module without a rule
    (GPT-2's ``Conv1D``) trains, through Opacus' functorch fallback. Freezing the embeddings
    is the usual practice of DP fine-tuning. Returns the names frozen."""
    import torch
    from opacus.grad_sample import GradSampleModule

    frozen = []
    output = getattr(model, "get_output_embeddings", lambda: None)()
    for name, module in model.named_modules():
        direct = list(module.named_parameters(recurse=False))
        leaf = next(module.children(), None) is None
        if direct and (
            isinstance(module, torch.nn.Embedding)
            or module is output
            or (type(module) not in GradSampleModule.GRAD_SAMPLERS and not leaf)
        ):
            for pname, p in direct:
                p.requires_grad_(False)
                frozen.append(f"{name}.{pname}")
    return frozen


def sequence_losses(logits: Any, labels: Any, causal: bool) -> Any:
    """Each sequence's mean cross-entropy over its labelled tokens (0 for a sequence with no
    label); a causal LM predicts token ``t + 1`` from position ``t``."""
    import torch

    if causal:
        logits, labels = logits[:, :-1], labels[:, 1:]
    ce = torch.nn.functional.cross_entropy(
        logits.float().transpose(1, 2), labels, ignore_index=-100, reduction="none"
    )
    counts = (labels != -100).sum(1).clamp(min=1)
    return ce.sum(1) / counts


class PrivateGradient:
    """The noisy, clipped sum of per-unit gradients of one DP-SGD step.

    Parameters
    ----------
    model
        The model (its trainable parameters are those per-unit gradients cover: call
        :func:`freeze_for_dp` first). It is hooked by Opacus' ``GradSampleModule``; call
        :meth:`close` to remove the hooks.
    causal
        Causal LM (labels shifted by one) or masked LM.
    max_grad_norm
        ``C``: each unit's gradient is scaled to norm at most ``C``.
    noise_multiplier
        ``σ``: the noise added to the sum has standard deviation ``σC``.
    max_physical_batch
        Sequences per forward pass.
    noise_seed
        Seeds the noise generator (derived from the run's secret).
    secure_mode
        Noise as the sum of four draws scaled by 1/2 (same distribution, robust to
        floating-point attacks).
    autocast
        A context manager factory for the forward pass (mixed precision), or ``None``.
    """

    def __init__(
        self,
        model: Any,
        *,
        causal: bool,
        max_grad_norm: float,
        noise_multiplier: float,
        max_physical_batch: int = 64,
        noise_seed: int = 0,
        secure_mode: bool = False,
        autocast: Callable[[], Any] | None = None,
    ) -> None:
        import torch
        from opacus.grad_sample import GradSampleModule

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.module = GradSampleModule(
                model, batch_first=True, loss_reduction="sum", strict=False
            )
        self.model = model
        # The output layer (frozen: tied to the frozen embeddings) applied at labelled
        # positions only; what trains sees every position, so per-sample gradients hold.
        self.head = SparseHead(model, causal)
        output = getattr(model, "get_output_embeddings", lambda: None)()
        if output is not None and any(p.requires_grad for p in output.parameters()):
            raise ConfigError(
                "DP-SGD here needs the output layer frozen (freeze_for_dp): it is applied at "
                "the labelled positions only"
            )
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ConfigError("DP-SGD: the model has no trainable parameter left")
        self.causal = causal
        self.clip = float(max_grad_norm)
        self.sigma = float(noise_multiplier)
        self.chunk = int(max_physical_batch)
        self.secure = secure_mode
        self.autocast = autocast
        device = self.params[0].device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(noise_seed)

    def close(self) -> None:
        """Remove Opacus' hooks and the sparse head's (the model is then a plain model)."""
        self.module.remove_hooks()
        self.head.close()

    def _chunk_gradients(self, batch: dict[str, Any], a: int, b: int, weights: Any) -> list[Any]:
        """Per-sequence gradients of rows ``a:b`` (each scaled by its weight)."""
        import contextlib

        import torch

        ctx = self.autocast() if self.autocast is not None else contextlib.nullcontext()
        rows = {k: batch[k][a:b] for k in ("input_ids", "attention_mask", "labels")}
        with ctx:
            losses = self.head.sequence_losses(rows)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            (losses * weights[a:b]).sum().backward()
        grads = []
        for p in self.params:
            gs = p.grad_sample
            if gs is None:  # a parameter this chunk did not reach
                gs = torch.zeros((b - a, *p.shape), device=p.device)
            grads.append(gs.float())
            p.grad_sample = None
            p.grad = None
        self.last_losses.append(losses.detach())
        return grads

    def clipped_sum(self, batch: dict[str, Any]) -> tuple[list[Any], Any]:
        """The sum over the batch's units of each unit's gradient clipped to norm ``C``, and
        every unit's norm before clipping.

        ``batch`` holds ``input_ids``, ``attention_mask`` and ``labels`` (one row per
        sequence) and ``units``: each row's unit (0, 1, ...; a unit's rows contiguous). A
        unit's gradient is the mean of its sequences' loss gradients.
        """
        import torch

        units = batch["units"]
        n = int(units.shape[0])
        sums = [torch.zeros_like(p, dtype=torch.float32) for p in self.params]
        self.last_losses: list[Any] = []
        if n == 0:
            return sums, torch.zeros(0)
        counts = torch.bincount(units)
        weights = 1.0 / counts[units].to(torch.float32)
        norms = []
        carry: list[Any] | None = None
        for a in range(0, n, self.chunk):
            b = min(n, a + self.chunk)
            grads = self._chunk_gradients(batch, a, b, weights.to(self.params[0].device))
            local = (units[a:b] - units[a]).to(self.params[0].device)
            width = int(local[-1]) + 1
            per_unit = [
                torch.zeros((width, *g.shape[1:]), device=g.device).index_add_(0, local, g)
                for g in grads
            ]
            if carry is not None:  # the first unit began in the previous chunk
                for u, c in zip(per_unit, carry, strict=True):
                    u[0] += c
            open_last = b < n and int(units[b]) == int(units[b - 1])
            done = width - 1 if open_last else width
            carry = [u[done] for u in per_unit] if open_last else None
            if done:
                sq = sum(u[:done].flatten(1).pow(2).sum(1) for u in per_unit)
                norm = sq.sqrt()
                factor = (self.clip / (norm + 1e-6)).clamp(max=1.0)
                for s, u in zip(sums, per_unit, strict=True):
                    s += torch.einsum("u,u...->...", factor, u[:done])
                norms.append(norm.detach().cpu())
        return sums, torch.cat(norms) if norms else torch.zeros(0)

    def noise(self, like: Any) -> Any:
        """Gaussian noise of standard deviation ``σC`` shaped like ``like``."""
        import torch

        std = self.sigma * self.clip
        if std == 0:
            return torch.zeros_like(like)
        draws = 4 if self.secure else 1
        total = torch.zeros_like(like)
        for _ in range(draws):
            total += torch.normal(
                0.0, std, size=like.shape, device=like.device, generator=self.generator
            )
        return total / 2 if self.secure else total

    def step_gradients(self, batch: dict[str, Any], expected_units: float) -> Any:
        """Set every trainable parameter's ``.grad`` to (clipped sum + noise) / expected
        units per step, the DP-SGD update direction; returns the step's mean sequence loss
        (``nan`` for an empty step)."""
        import torch

        sums, _ = self.clipped_sum(batch)
        for p, s in zip(self.params, sums, strict=True):
            p.grad = ((s + self.noise(s)) / expected_units).to(p.dtype)
        if not self.last_losses:
            return math.nan
        return float(torch.cat(self.last_losses).mean())
