"""Several unit tasks data-parallel in one torchrun launch (a test helper: the runner
launches one per unit, ``actlab.runner.multiprocess``, whose ranks do what this does for
each task).

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/_ddp_units.py \\
        TASKS.json RECORDS.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from actlab.runner.atomic import atomic_write_json
from actlab.runner.execute import UnitTask, execute_unit
from actlab.train.distributed import cleanup, init_distributed


def main() -> None:
    tasks = [UnitTask(**fields) for fields in json.loads(Path(sys.argv[1]).read_text())]
    info = init_distributed("cpu")
    try:
        records = [execute_unit(task, dist=info) for task in tasks]
        if info.is_main:
            atomic_write_json(sys.argv[2], records)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
