"""The dashboard process: Streamlit's page (``dashboard/app.py``) inside a Starlette app with the
login and logout routes (``dashboard/routes.py``).

``tally up`` runs ``python -m streamlit run dashboard/server.py``: Streamlit finds ``app`` (an
``st.App``) and serves it with uvicorn, with the same ``--server.*`` options as a plain page.
"""

from __future__ import annotations

import threading
from pathlib import Path

from starlette.middleware import Middleware
from streamlit.starlette import App

import dashboard.page  # imported at start-up: the first visitor does not wait for pandas, Arrow, DuckDB
from dashboard.framing import FramingPolicy, share_embedders
from dashboard.routes import LoginRoutes
from dashboard.sites import with_current_sites
from tally.settings import load_settings

# Seconds the server waits for the warm-up before it listens: a warehouse whose file lists take
# longer is still opened, in the background, and the first page waits only for what is left.
WARM_UP_WAIT_SECONDS = 20.0

# Every response says who may frame it (dashboard/framing.py); the list is read when the server starts,
# a share link's site's embed_origins at each of its pages (runtime sites too).
settings = load_settings()
framing = Middleware(
    FramingPolicy,
    frame_ancestors=settings.dashboard.frame_ancestors,
    embedders=share_embedders(lambda: with_current_sites(settings)),
)
app = App(Path(__file__).with_name("app.py"), routes=LoginRoutes().routes(), middleware=[framing])
# ... nor for the tables' file lists: opened before the server listens (dashboard.page.warm_up)
warming = threading.Thread(target=dashboard.page.warm_up, name="tally-warm-up", daemon=True)
warming.start()
warming.join(WARM_UP_WAIT_SECONDS)
