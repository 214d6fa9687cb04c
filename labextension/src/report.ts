/**
 * The GPU-time report in a main-area tab: the server renders a
 * self-contained page (inline SVG, no scripts), shown in a sandboxed iframe.
 */
import { IFrame, MainAreaWidget } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';

export function createReportWidget(
  settings: ServerConnection.ISettings,
  trans: TranslationBundle
): MainAreaWidget<IFrame> {
  const frame = new IFrame({ sandbox: [] });
  frame.url = URLExt.join(
    settings.baseUrl,
    'jupyter-pause',
    'api',
    'report.html'
  );
  const title = trans.__('GPU-Time Report');
  frame.node.querySelector('iframe')?.setAttribute('title', title);
  const widget = new MainAreaWidget({ content: frame });
  widget.id = 'jupyter-pause-report';
  widget.title.label = title;
  widget.title.closable = true;
  widget.addClass('jp-PauseReport');
  return widget;
}
