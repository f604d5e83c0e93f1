"""Extract the ```python block under '## Triton sketch' of each note and run its test."""
import importlib.util, os, re, sys, traceback
import torch

KB = os.environ.get("KB", "/work/main/knowledge_base/ops")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
TMP = os.environ.get("SKDIR", "/tmp/kbcheck/sk")
os.makedirs(TMP, exist_ok=True)

def load(op):
    text = open(f"{KB}/{op}.md").read()
    sec = text.split("## Triton sketch", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", sec, re.S).group(1)
    path = f"{TMP}/sk_{op}.py"
    open(path, "w").write(code)
    spec = importlib.util.spec_from_file_location(f"sk_{op}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def _interp_index_fix():
    """numpy 2.4 refuses int() of a 1-element 1-d array; Triton 3.6's interpreter does that for
    `range(runtime_int)`. Patch __index__ after the interpreter installs its own."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from triton.runtime import interpreter as it
    orig = it._patch_lang_tensor
    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    it._patch_lang_tensor = patched


def main(ops):
    _interp_index_fix()
    import tests
    ok = []
    for op in ops:
        try:
            mod = load(op)
            getattr(tests, "t_" + op)(mod, DEV)
            print(f"PASS {op}")
            ok.append(op)
        except Exception:
            print(f"FAIL {op}")
            traceback.print_exc()
    print("passed", len(ok), "of", len(ops))

if __name__ == "__main__":
    main(sys.argv[1:])
