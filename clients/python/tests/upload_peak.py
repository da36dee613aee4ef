"""Run as a separate process by test_client_upload: uploads one file with the client and
prints, as JSON, the process's peak resident memory before and after the upload."""

from __future__ import annotations

import json
import sys

from headwater_client import Client


def peak_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    url, credential, secret, client_id, dataset_id, path = sys.argv[1:7]
    calls: list[tuple[int, int]] = []
    with Client(url, credential, secret) as hw:
        hw.whoami()  # imports, connection and token before the baseline
        before = peak_kib()
        transaction = hw.upload_file(
            path, client_id, dataset_id, progress=lambda sent, total: calls.append((sent, total))
        )
        after = peak_kib()
    print(
        json.dumps(
            {
                "before_kib": before,
                "after_kib": after,
                "transaction_id": transaction.transaction_id,
                "progress": calls,
            }
        )
    )


if __name__ == "__main__":
    main()
