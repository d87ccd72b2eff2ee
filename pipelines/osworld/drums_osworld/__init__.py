"""OSWorld's harness on Drums sessions: `register()`, then an unchanged
`DesktopEnv(provider_name="drums", path_to_vm=CHECKPOINT, ...)`.

Nothing on disk is patched. `register()` does four things in this process, and only these
(docs/osworld.md, "How register() hooks in"):

1. Modules that desktop_env imports at load time and Drums does not install (ABSENT, with the reason)
   become importable placeholders whose every use raises ModuleNotFoundError naming the reason. A finder
   placed last on sys.meta_path makes them, so an installed module of that name always wins.
2. `create_vm_manager_and_provider` is wrapped: "drums" gives (DrumsVMManager, DrumsProvider); any other
   name goes to OSWorld's own factory unchanged. The wrapper replaces the name in
   `desktop_env.providers` and in `desktop_env.desktop_env`, which bound it at import.
3. DesktopEnv.__init__ accepts only the provider names of two sets in its code ("clean start": docker,
   aws, ...; "dirty start": vmware, virtualbox) and raises ValueError for any other. Its code object's
   constant for the clean-start set gets "drums" added (a session taken from a checkpoint starts clean, as
   OSWorld's docker and cloud providers do: the first reset runs no revert). The function is otherwise
   the same code; register() refuses a desktop-env whose __init__ has no such constant.
4. DesktopEnv.reset is wrapped: with the Drums provider, a task's `"proxy"` goes to
   DrumsProvider.want_proxy before the original reset runs, so the sessions the task runs on get the
   operator's upstream proxy ($DRUMS_OSWORLD_PROXY), and a task asking for one when none is named fails
   before it starts. OSWorld's own proxy setup (enable_proxy, which installs tinyproxy in the VM with
   apt-get) is not used.
"""
import importlib.abc
import importlib.machinery
import sys
import types

__all__ = ["register", "ABSENT", "DrumsProvider", "DrumsVMManager"]

# Imported by desktop_env's evaluators at load time, not installed (pipelines/osworld/requirements.txt
# has what is): name -> why. A task that reaches one fails with this reason and is not counted as working.
ABSENT = {
    "easyocr": "needs torch (gigabytes of wheels with its CUDA libraries) and downloads its OCR model weights from the internet at "
    "first use, which these machines do not have; only the metric compare_image_text uses it (1 task, "
    "multi_apps 02ce9a50, whose input is downloaded from the internet)",
    "librosa": "pulls numba, llvmlite, scikit-learn, soundfile and pooch for one metric, compare_audios (3 tasks: "
    "vlc 8f080098, multi_apps 778efd0a, libreoffice_impress c59742c0, whose audio is downloaded from the "
    "internet)",
}


class _Absent(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise ModuleNotFoundError(f"{self.__name__} is not installed by Drums ({ABSENT[self.__name__]}); "
                                  f"{self.__name__}.{name} cannot be used", name=self.__name__)


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in ABSENT:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return _Absent(spec.name)

    def exec_module(self, module):
        pass


def _install_absent_finder():
    if not any(isinstance(f, _AbsentFinder) for f in sys.meta_path):
        sys.meta_path.append(_AbsentFinder())


def _admit_clean_start(env_class):
    code = env_class.__init__.__code__
    consts = list(code.co_consts)
    hits = [i for i, c in enumerate(consts) if isinstance(c, frozenset) and "docker" in c and "vmware" not in c]
    if len(hits) != 1:
        raise RuntimeError("this desktop-env's DesktopEnv.__init__ has no single set of clean-start provider "
                           "names (desktop-env 1.0.2 has one): drums_osworld.register() cannot admit 'drums'")
    if "drums" in consts[hits[0]]:
        return
    consts[hits[0]] = consts[hits[0]] | {"drums"}
    env_class.__init__.__code__ = code.replace(co_consts=tuple(consts))


def register():
    """Make provider_name="drums" work in this process's DesktopEnv. Idempotent."""
    _install_absent_finder()
    import desktop_env.desktop_env as de
    import desktop_env.providers as providers
    from .provider import DrumsProvider, DrumsVMManager

    original = providers.create_vm_manager_and_provider
    if not getattr(original, "drums", False):
        def create_vm_manager_and_provider(provider_name, region, use_proxy=False):
            if provider_name.lower().strip() == "drums":
                return DrumsVMManager(), DrumsProvider(region)
            return original(provider_name, region, use_proxy=use_proxy)

        create_vm_manager_and_provider.drums = True
        create_vm_manager_and_provider.__wrapped__ = original
        providers.create_vm_manager_and_provider = create_vm_manager_and_provider
    de.create_vm_manager_and_provider = providers.create_vm_manager_and_provider
    _admit_clean_start(de.DesktopEnv)
    _map_task_proxy(de.DesktopEnv, DrumsProvider)


def _map_task_proxy(env_class, provider_class):
    original = env_class.reset
    if getattr(original, "drums", False):
        return

    def reset(self, task_config=None, *args, **kwargs):
        if isinstance(getattr(self, "provider", None), provider_class):
            self.provider.want_proxy(bool((task_config or {}).get("proxy", False)))
        return original(self, task_config, *args, **kwargs)

    reset.drums = True
    reset.__wrapped__ = original
    reset.__doc__ = original.__doc__
    env_class.reset = reset


def __getattr__(name):
    # The provider classes import desktop_env: loaded on first use, so `import drums_osworld` alone
    # needs nothing of OSWorld's.
    if name in ("DrumsProvider", "DrumsVMManager"):
        from . import provider
        return getattr(provider, name)
    raise AttributeError(name)
