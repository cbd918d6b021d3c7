import time, shutil
from pathlib import Path
from harness.broker import start_broker
t=time.monotonic()
b=start_broker(launcher="local", progress=lambda m: print(f"[{time.monotonic()-t:6.1f}s] {m}", flush=True))
cold=time.monotonic()-t
b.stop()
t=time.monotonic()
b=start_broker(launcher="local", progress=lambda m: None)
warm=time.monotonic()-t
b.stop()
print(f"cold(fetch+start)={cold:.1f}s warm={warm:.1f}s")
