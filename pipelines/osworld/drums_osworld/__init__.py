"""OSWorld's harness on Drums sessions: `register()`, then an unchanged
`DesktopEnv(provider_name="drums", path_to_vm=CHECKPOINT, ...)`.

Nothing on disk is patched. `register()` does five things in this process, and only these
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
   apt-get) is not used. With $DRUMS_OSWORLD_URL_MAP set, the same wrapper rewrites the task's URLs first
   (url_map, map_task_urls): a test or an operator points a task at a mirror or a stand-in internet.
5. tldextract, which OSWorld's evaluators use to compare URLs, reads the public suffix list bundled with
   it instead of fetching one from the internet at its first call (by a name lookup through the host's
   resolver, then HTTPS): a harness's host sends nothing for it, and the answer does not depend on
   whether the host has the internet.
"""
import copy
import importlib.abc
import importlib.machinery
import os
import re
import sys
import types

__all__ = ["register", "ABSENT", "DrumsProvider", "DrumsVMManager", "url_map", "map_task_urls"]

# The harness's URL map (docs/osworld.md, "Tasks on a stand-in internet"): whitespace-separated
# PREFIX=REPLACEMENT pairs (a prefix holds no `=`); every occurrence of a prefix in a task's config and
# evaluator is replaced, the longest prefix first, before the task's setup runs.
URL_MAP_ENV = "DRUMS_OSWORLD_URL_MAP"

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
    url_map()  # a malformed map fails here, before any session is taken
    _map_task(de.DesktopEnv, DrumsProvider)
    _offline_suffix_list()


def url_map(text=None):
    """$DRUMS_OSWORLD_URL_MAP (or `text`) as a list of (prefix, replacement), the longest prefix first.
    ValueError for a pair without `=` or with an empty prefix."""
    text = os.environ.get(URL_MAP_ENV, "") if text is None else text
    pairs = []
    for word in text.split():
        prefix, eq, repl = word.partition("=")
        if not eq or not prefix:
            raise ValueError(f"{URL_MAP_ENV}: {word!r} is not PREFIX=REPLACEMENT")
        pairs.append((prefix, repl))
    return sorted(pairs, key=lambda p: -len(p[0]))


def map_task_urls(task, pairs):
    """A copy of `task` with every occurrence of each prefix of `pairs` (url_map's) in the strings of its
    `config` and `evaluator` replaced (other keys, such as `source`, are kept: they are not fetched). One
    pass over each string: a replacement is not mapped again."""
    if not pairs or not task:
        return task
    table = dict(pairs)
    pattern = re.compile("|".join(re.escape(p) for p, _ in pairs))

    def walk(v):
        if isinstance(v, str):
            return pattern.sub(lambda m: table[m.group(0)], v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    out = copy.copy(task)
    for key in ("config", "evaluator"):
        if key in out:
            out[key] = walk(out[key])
    return out


def _offline_suffix_list():
    # tldextract's module-level extractor (what tldextract.extract calls) would fetch the public suffix
    # list from the internet at its first use, resolving the list's host name through the host's resolver;
    # with no URLs to try it reads the snapshot bundled with the package. Also what it does on a host
    # without the internet, only without the lookup and the wait for it.
    try:
        import tldextract.tldextract as tx
    except ImportError:
        return
    tx.TLD_EXTRACTOR.suffix_list_urls = ()


def _map_task(env_class, provider_class):
    original = env_class.reset
    if getattr(original, "drums", False):
        return

    def reset(self, task_config=None, *args, **kwargs):
        if isinstance(getattr(self, "provider", None), provider_class):
            task_config = map_task_urls(task_config, url_map())
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
