"""A fragment's rerun alone, for AppTest: what a widget in a fragment, or its timer, asks in a browser.

AppTest runs the whole script on every run. Here a script runner is given the fragments' ids, as
Streamlit's server gives them on a tab picked or a fragment's ``run_every``, with ``app``'s session
state and registered fragments, so the fragments' bodies run again alone.
"""

from __future__ import annotations

from unittest.mock import MagicMock

from streamlit.runtime import Runtime
from streamlit.runtime.caching.storage.dummy_cache_storage import MemoryCacheStorageManager
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData, ScriptRequests
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.local_script_runner import LocalScriptRunner


def rerun_fragments_alone(app: AppTest) -> None:
    """Rerun alone every fragment ``app``'s last run drew, as a widget in one does in a browser."""
    runtime = MagicMock(spec=Runtime)
    runtime.media_file_mgr = MediaFileManager(MemoryMediaFileStorage("/mock/media"))
    runtime.cache_storage_manager = MemoryCacheStorageManager()
    Runtime._instance = runtime
    try:
        pages = PagesManager(app._script_path, ScriptCache(), setup_watcher=False)
        runner = LocalScriptRunner(app._script_path, app._session_state, pages, fragment_storage=app._fragment_storage)
        runner._requests = ScriptRequests()  # instead of its first request, a whole run
        runner._requests.request_rerun(RerunData(fragment_id_queue=list(app._fragment_storage._fragments)))
        runner.start()
        runner.join()
    finally:
        Runtime._instance = None
