"""Isotropy of a token embedding matrix and the DelDirection post-processing (DefinitionEMB, Section 3 and Appendix A).

* `isotropy(E)`: the partition-function ratio I(E) of Mu and Viswanath (2018, Eq. 1), I(E) in (0, 1], 1 = isotropic.
* `frequency_groups` / `isotropy_by_group`: the frequent (30%), medium (50%) and rare (20%) token groups of Table 1
  (by vocabulary index, the paper's pre-training frequency rank) or of Section 4 (by counts in the fine-tuning data).
* `remove_dominant_directions` / `apply_del_direction`: DelDirection, Mu and Viswanath's "all-but-the-top"
  post-processing (subtract the mean, remove the top-beta principal directions; the paper's baseline uses beta = 10).
"""

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

GROUP_NAMES = ("frequent", "medium", "rare")
SignConvention = Literal["symmetric", "solver"]


def _as_embedding_matrix(embeddings: Any, name: str = "embeddings", min_rows: int = 1) -> torch.Tensor:
    """`embeddings` as a detached float64 CPU matrix, after checking that it is a non-empty 2-D real matrix."""
    if isinstance(embeddings, torch.nn.Embedding):
        embeddings = embeddings.weight
    if not isinstance(embeddings, torch.Tensor):
        try:
            embeddings = torch.as_tensor(np.asarray(embeddings))
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"{name} must be a 2-D tensor or array of shape (tokens, width), got {type(embeddings)}."
            ) from error
    if embeddings.dim() != 2:
        raise ValueError(
            f"{name} must be a 2-D matrix of shape (tokens, width); got shape {tuple(embeddings.shape)}. "
            "Pass e.g. model.get_input_embeddings().weight."
        )
    is_real = embeddings.is_floating_point() or embeddings.dtype in (torch.int32, torch.int64)
    if embeddings.is_complex() or not is_real:
        raise TypeError(f"{name} must hold real numbers, got dtype {embeddings.dtype}.")
    if embeddings.shape[0] < min_rows or embeddings.shape[1] < 1:
        raise ValueError(
            f"{name} has shape {tuple(embeddings.shape)}; at least {min_rows} row(s) and one column are needed here."
        )
    matrix = embeddings.detach().to(device="cpu", dtype=torch.float64)
    if not torch.isfinite(matrix).all():
        raise ValueError(f"{name} contains inf or NaN values; isotropy and DelDirection need finite embeddings.")
    return matrix


def partition_log_values(embeddings: Any, sign_convention: SignConvention = "symmetric") -> torch.Tensor:
    """log Z(b) = log sum_i exp(b . e_i) for every direction b of the isotropy set (see `isotropy`), in float64.

    Returns a 1-D float64 tensor: 2 * width values for "symmetric" (b and -b for each eigenvector, in that order),
    width values for "solver".
    """
    if sign_convention not in ("symmetric", "solver"):
        raise ValueError(f"sign_convention must be 'symmetric' or 'solver', got {sign_convention!r}.")
    matrix = _as_embedding_matrix(embeddings)
    gram = matrix.T @ matrix
    if sign_convention == "solver":
        # The reference implementations (Bis et al. 2021's isotropy.py, which the paper links) call
        # numpy.linalg.eig and use the eigenvectors with whatever signs LAPACK returns.
        eigenvectors = torch.from_numpy(np.ascontiguousarray(np.linalg.eig(gram.numpy())[1].real))
        return torch.logsumexp(matrix @ eigenvectors, dim=0)
    _, eigenvectors = torch.linalg.eigh(gram)
    projections = matrix @ eigenvectors
    # logsumexp keeps Z finite for embeddings with large norms, where exp(b . e) itself overflows float64.
    return torch.cat([torch.logsumexp(projections, dim=0), torch.logsumexp(-projections, dim=0)])


def isotropy(embeddings: Any, sign_convention: SignConvention = "symmetric") -> float:
    """The isotropy I(E) = min_b Z(b) / max_b Z(b) of Mu and Viswanath (2018, Eq. 1), Appendix A of the paper.

    Z(b) = sum_i exp(b . e_i) over the rows e_i of E, and b runs over the unit eigenvectors of E^T E. The embeddings are
    used as given (not centred), as in Eq. 1. Computed in float64 with log-sum-exp: I = exp(min log Z - max log Z).

    Eigenvector signs. An eigenvector is defined only up to its sign, and Z(b) != Z(-b) in general, so "the set of
    eigenvectors" is not a well-defined set of directions until a sign is chosen. The default, "symmetric", uses both
    b and -b for every eigenvector. Reasons: (1) Mu and Viswanath's quantity approximates min / max of Z(c) over ALL
    unit vectors c, a set that contains -c with every c; each eigenvector names an axis and both of its directions are
    equally valid probes, so the symmetric set is the faithful finite approximation (and never a looser one: its
    min / max brackets that of either single-sign choice); (2) the result is a property of E alone: it does not change
    with the eigen-solver, the library version or the number of threads, and it is invariant under E -> -E (a
    reflection of the embedding space), which a single arbitrary sign is not.
    "solver" reproduces the published reference code (numpy.linalg.eig, one sign, as LAPACK returns it): use it only to
    compare with figures computed that way (e.g. the paper's Table 1); it is not guaranteed to be reproducible
    across machines. On all-MiniLM-L6-v2's input embeddings (30522 x 384): symmetric 0.843 for all tokens and 0.696
    for the last 20% of the vocabulary; solver 0.885 and 0.805.

    Args:
        embeddings: (tokens, width) matrix (tensor, array or nn.Embedding); any float dtype.
        sign_convention: "symmetric" (default, see above) or "solver".

    Returns:
        I(E) in (0, 1]; close to 1 means isotropic.

    Raises:
        ValueError: not a finite 2-D matrix with at least one row.

    Example:

    ```python
    >>> round(isotropy(torch.cat([torch.eye(3), -torch.eye(3)])), 6)  # the 6 signed unit vectors: isotropic
    1.0
    >>> isotropy(torch.tensor([[3.0, 0.0], [3.0, 0.0], [3.0, 0.0]])) < 0.01  # all along one direction
    True

    ```
    """
    log_values = partition_log_values(embeddings, sign_convention)
    return float(torch.exp(log_values.min() - log_values.max()))


def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    if len(fractions) != 3 or any(not isinstance(value, (int, float)) or value < 0 for value in fractions):
        raise ValueError(
            f"fractions must be three non-negative numbers (frequent, medium, rare), got {tuple(fractions)}."
        )
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions must sum to 1, got {tuple(fractions)} (sum {sum(fractions)}).")
    return tuple(float(value) for value in fractions)  # type: ignore[return-value]


def _counts_as_tensor(counts: Any, vocab_size: int | None) -> torch.Tensor:
    """Counts (a 1-D sequence/tensor indexed by token id, or a mapping token id -> count) as a 1-D float64 tensor."""
    if isinstance(counts, Mapping):
        if not counts:
            raise ValueError("counts is empty: no token appears, so there is nothing to group.")
        keys = [int(key) for key in counts]
        if min(keys) < 0:
            raise ValueError(f"counts has a negative token id ({min(keys)}).")
        size = vocab_size if vocab_size is not None else max(keys) + 1
        if max(keys) >= size:
            raise ValueError(f"counts has token id {max(keys)}, outside the vocabulary of size {size}.")
        dense = torch.zeros(size, dtype=torch.float64)
        dense[torch.tensor(keys)] = torch.tensor([float(counts[key]) for key in counts], dtype=torch.float64)
        counts = dense
    counts = torch.as_tensor(counts, dtype=torch.float64) if not isinstance(counts, torch.Tensor) else counts.double()
    if counts.dim() != 1:
        raise ValueError(f"counts must be 1-D (one count per token id), got shape {tuple(counts.shape)}.")
    if vocab_size is not None and counts.numel() != vocab_size:
        raise ValueError(f"counts has {counts.numel()} entries but the vocabulary has {vocab_size} tokens.")
    if (counts < 0).any() or not torch.isfinite(counts).all():
        raise ValueError("counts must be finite and non-negative.")
    return counts


def frequency_groups(
    token_ids: Any = None,
    vocab_size: int | None = None,
    counts: Any = None,
    fractions: Sequence[float] = (0.3, 0.5, 0.2),
) -> dict[str, torch.LongTensor]:
    """Split tokens into the frequent / medium / rare groups of the paper (30% / 50% / 20% by default).

    Without counts, tokens are ranked by vocabulary index (the paper's Table 1: the vocabulary is sorted by pre-training
    frequency, so a lower index is a more frequent token). With counts (Section 4: "based on their frequency in the
    fine-tuning dataset"), only tokens with a positive count are grouped (the appearing tokens), ranked by descending
    count; ties keep vocabulary-index order. Group boundaries are round(0.3 n) and round(0.8 n) of the n ranked tokens.

    Args:
        token_ids: the candidate token ids (any order, no duplicates); None -> range(vocab_size) (or every id of
            counts).
        vocab_size: the vocabulary size, used when token_ids is None and to check ids.
        counts: per-token counts in the fine-tuning data: a 1-D tensor/sequence indexed by token id, or a mapping
            token id -> count (e.g. a collections.Counter).
        fractions: (frequent, medium, rare) shares, summing to 1.

    Returns:
        {"frequent", "medium", "rare"} -> LongTensor of token ids, most frequent first.

    Example:

    ```python
    >>> {name: ids.tolist() for name, ids in frequency_groups(vocab_size=10).items()}
    {'frequent': [0, 1, 2], 'medium': [3, 4, 5, 6, 7], 'rare': [8, 9]}
    >>> frequency_groups(counts=[0, 5, 1, 9])["frequent"].tolist()  # appearing tokens 3, 1, 2 by count
    [3]

    ```
    """
    fractions = _check_fractions(fractions)
    if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1):
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}.")
    count_values = _counts_as_tensor(counts, vocab_size) if counts is not None else None
    if count_values is not None and vocab_size is None:
        vocab_size = count_values.numel()
    if token_ids is None:
        if vocab_size is None:
            raise ValueError("frequency_groups needs token_ids, vocab_size or counts.")
        candidates = torch.arange(vocab_size)
    else:
        candidates = torch.as_tensor(token_ids).reshape(-1)
        if candidates.is_floating_point() or candidates.dtype == torch.bool:
            raise TypeError(f"token_ids must be integers, got dtype {candidates.dtype}.")
        candidates = candidates.long()
        if candidates.numel() and candidates.min() < 0:
            raise ValueError(f"token_ids contains a negative id ({int(candidates.min())}).")
        if vocab_size is not None and candidates.numel() and candidates.max() >= vocab_size:
            raise ValueError(
                f"token_ids contains id {int(candidates.max())}, outside the vocabulary of size {vocab_size}."
            )
        if candidates.unique().numel() != candidates.numel():
            raise ValueError("token_ids contains duplicates; pass each token once.")
    if count_values is None:
        ranked = candidates.sort().values
    else:
        candidates = candidates.sort().values
        candidate_counts = count_values[candidates]
        appearing = candidate_counts > 0
        candidates, candidate_counts = candidates[appearing], candidate_counts[appearing]
        # A stable sort on descending count keeps ascending-index (pre-training rank) order among ties.
        order = torch.sort(-candidate_counts, stable=True).indices
        ranked = candidates[order]
    total = ranked.numel()
    if total == 0:
        raise ValueError("No token to group: token_ids is empty or no candidate token has a positive count.")
    first_boundary = round(fractions[0] * total)
    second_boundary = round((fractions[0] + fractions[1]) * total)
    return {
        "frequent": ranked[:first_boundary].clone(),
        "medium": ranked[first_boundary:second_boundary].clone(),
        "rare": ranked[second_boundary:].clone(),
    }


def isotropy_by_group(
    embeddings: Any,
    token_ids: Any = None,
    counts: Any = None,
    sign_convention: SignConvention = "symmetric",
) -> dict[str, float]:
    """I(E) of the frequent / medium / rare groups (see `frequency_groups`) and of all grouped tokens ("all").

    Without token_ids and counts every row is grouped, so "all" is I(E) of the whole matrix (Table 1). With token_ids
    and/or counts, "all" is I(E) over the grouped tokens only (e.g. the appearing tokens).

    Args:
        embeddings: (vocab_size, width) matrix, row v = token id v.
        token_ids: restrict to these token ids (e.g. the tokens appearing in a task); None -> every row.
        counts: per-token counts in the fine-tuning data (see `frequency_groups`); None -> rank by index.
        sign_convention: see `isotropy`.

    Returns:
        {"frequent", "medium", "rare", "all"} -> I(E).

    Raises:
        ValueError: a group is empty (too few tokens), or ids outside the matrix.

    Example:

    ```python
    >>> scores = isotropy_by_group(torch.randn(100, 4, generator=torch.Generator().manual_seed(0)))
    >>> sorted(scores)
    ['all', 'frequent', 'medium', 'rare']

    ```
    """
    matrix = _as_embedding_matrix(embeddings)
    groups = frequency_groups(token_ids=token_ids, vocab_size=matrix.shape[0], counts=counts)
    empty = [name for name, ids in groups.items() if ids.numel() == 0]
    if empty:
        raise ValueError(f"The group(s) {empty} are empty: too few tokens to split into frequent/medium/rare.")
    scores = {name: isotropy(matrix[ids], sign_convention) for name, ids in groups.items()}
    grouped = torch.cat([groups[name] for name in GROUP_NAMES])
    scores["all"] = isotropy(matrix if grouped.numel() == matrix.shape[0] else matrix[grouped], sign_convention)
    return scores


def _check_num_directions(num_directions: int, rows: int, width: int) -> None:
    if isinstance(num_directions, bool) or not isinstance(num_directions, int) or num_directions < 0:
        raise ValueError(f"num_directions must be a non-negative integer, got {num_directions!r}.")
    if num_directions >= width:
        raise ValueError(
            f"num_directions={num_directions} must be smaller than the embedding width {width}: removing every "
            "direction leaves only zeros. The paper uses 10 (Mu and Viswanath suggest about width / 100)."
        )
    if rows < num_directions + 1:
        raise ValueError(
            f"Removing {num_directions} principal directions needs at least {num_directions + 1} rows (the centred "
            f"matrix has rank at most rows - 1); got {rows}."
        )


def principal_directions(embeddings: Any, num_directions: int) -> torch.Tensor:
    """The top `num_directions` principal directions (unit rows, largest variance first) of the centred embeddings,
    as a (num_directions, width) float64 tensor."""
    matrix = _as_embedding_matrix(embeddings)
    _check_num_directions(num_directions, *matrix.shape)
    centred = matrix - matrix.mean(dim=0, keepdim=True)
    # Eigenvectors of the (width x width) scatter matrix are the right singular vectors of the centred matrix;
    # this is much cheaper than an SVD of the (tokens x width) matrix for a 50k-token vocabulary.
    _, eigenvectors = torch.linalg.eigh(centred.T @ centred)
    return eigenvectors[:, eigenvectors.shape[1] - num_directions :].flip(-1).T.contiguous()


def remove_dominant_directions(embeddings: Any, num_directions: int = 10) -> torch.Tensor:
    """DelDirection (Mu and Viswanath 2018, "all-but-the-top"): subtract the mean embedding, then remove the
    projections on the top `num_directions` principal directions of the centred matrix.

    Computed in float64 and returned in the input's dtype (float tensors; other inputs come back as float32).

    Args:
        embeddings: (tokens, width) matrix.
        num_directions: beta, the number of dominant directions removed (the paper: 10); 0 only centres.

    Returns:
        The post-processed (tokens, width) matrix: zero mean, no component along the removed directions.

    Raises:
        ValueError: not a 2-D matrix, num_directions >= width, or fewer than num_directions + 1 rows.

    Example:

    ```python
    >>> processed = remove_dominant_directions(torch.randn(50, 8, generator=torch.Generator().manual_seed(0)), 2)
    >>> bool(processed.mean(dim=0).abs().max() < 1e-6)
    True

    ```
    """
    matrix = _as_embedding_matrix(embeddings)
    directions = principal_directions(matrix, num_directions)
    centred = matrix - matrix.mean(dim=0, keepdim=True)
    processed = centred - (centred @ directions.T) @ directions
    output_dtype = embeddings.dtype if isinstance(embeddings, torch.Tensor) and embeddings.is_floating_point() else None
    return processed.to(output_dtype or torch.float32)


def apply_del_direction(model: Any, num_directions: int = 10) -> Any:
    """A deep copy of `model` (same class) whose input embeddings went through DelDirection.

    The weights are overwritten in place in the copy, so output embeddings tied to the input embeddings (e.g.
    BertForMaskedLM's decoder, BART's lm_head) follow; untied output embeddings are left as they are. The copy's config
    records `del_direction = {"num_directions": beta}`. The given model is not modified.

    Args:
        model: a transformers PreTrainedModel (anything with get_input_embeddings()).
        num_directions: beta (the paper: 10).

    Returns:
        The post-processed copy.

    Example:

    ```python
    >>> from transformers import BertConfig, BertForMaskedLM
    >>> model = BertForMaskedLM(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
    ...                                    num_attention_heads=2, intermediate_size=32))
    >>> processed = apply_del_direction(model, num_directions=2)
    >>> processed.config.del_direction
    {'num_directions': 2}

    ```
    """
    get_input_embeddings = getattr(model, "get_input_embeddings", None)
    if get_input_embeddings is None:
        raise TypeError(f"apply_del_direction needs a model with get_input_embeddings(), got {type(model).__name__}.")
    try:
        source_embeddings = get_input_embeddings()
    except NotImplementedError as error:
        raise TypeError(f"{type(model).__name__} does not expose its input embeddings.") from error
    if source_embeddings is None or not isinstance(getattr(source_embeddings, "weight", None), torch.Tensor):
        raise TypeError(f"{type(model).__name__}.get_input_embeddings() has no weight matrix.")
    # Validate (and compute) before copying so that a bad num_directions costs nothing.
    processed = remove_dominant_directions(source_embeddings.weight, num_directions)

    copied = copy.deepcopy(model)
    target = copied.get_input_embeddings().weight
    with torch.no_grad():
        target.copy_(processed.to(device=target.device, dtype=target.dtype))
    output_embeddings = copied.get_output_embeddings() if hasattr(copied, "get_output_embeddings") else None
    output_weight = getattr(output_embeddings, "weight", None)
    if output_weight is not None and output_weight is not target and output_weight.data_ptr() != target.data_ptr():
        logger.info(
            "%s has output embeddings not tied to its input embeddings: DelDirection changed the input embeddings "
            "only.",
            type(model).__name__,
        )
    if getattr(copied, "config", None) is not None:
        copied.config.del_direction = {"num_directions": num_directions}
    return copied
