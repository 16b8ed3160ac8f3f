"""When a progress bar is worth showing: not for a data step that ends in a second or two.

`datasets` draws a bar for every `Dataset.map`, however small; a run then prints a page of bars for steps nobody
waits for (tokenising a few hundred rows). Wrap such a step in `progress_bars_for(len(rows))`.
"""

import contextlib
from collections.abc import Iterator

import datasets

# Rows below which tokenising or building features with `Dataset.map` takes a second or two on a CPU: no bar.
MIN_ROWS_FOR_PROGRESS = 5000


@contextlib.contextmanager
def progress_bars_for(rows: int, min_rows: int = MIN_ROWS_FOR_PROGRESS) -> Iterator[None]:
    """Hide `datasets`' progress bars inside the block when it handles fewer than `min_rows` rows.

    Bars that the caller or the user switched off stay off; bars that were on are switched on again afterwards.

    Example:

    ```python
    >>> import datasets
    >>> rows = datasets.Dataset.from_dict({"text": ["a", "b"]})
    >>> with progress_bars_for(len(rows)):
    ...     rows = rows.map(lambda row: {"length": len(row["text"])}, desc="Measuring")  # no bar for 2 rows
    >>> datasets.are_progress_bars_disabled()
    False

    ```
    """
    if rows >= min_rows or datasets.are_progress_bars_disabled():
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()
