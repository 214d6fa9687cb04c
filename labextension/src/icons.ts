import { LabIcon } from '@jupyterlab/ui-components';

export const pauseIcon = new LabIcon({
  name: 'jupyter-pause:pause',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16"><g class="jp-icon3" fill="#616161"><rect x="6" y="4" width="4" height="16" rx="1"/><rect x="14" y="4" width="4" height="16" rx="1"/></g></svg>'
});

/** Resume: play out of a saved frame, so it never reads as "Run" (a bare ▶). */
export const resumeIcon = new LabIcon({
  name: 'jupyter-pause:resume',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16"><g class="jp-icon3" fill="#616161"><path d="M3 5h12a2 2 0 0 1 2 2v2h-2V7H3v10h12v-2h2v2a2 2 0 0 1-2 2H3a2 2 0 0 1-2-2V7a2 2 0 0 1 2-2z"/><path d="M10 8.5v7l11-3.5z"/></g></svg>'
});

/** Saved state: a stack of snapshots. */
export const snapshotsIcon = new LabIcon({
  name: 'jupyter-pause:snapshots',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16"><g class="jp-icon3" fill="#616161"><rect x="3" y="11" width="18" height="9" rx="1.5"/><rect x="5" y="7" width="14" height="2.5" rx="1"/><rect x="7" y="3.5" width="10" height="2.5" rx="1"/></g></svg>'
});
