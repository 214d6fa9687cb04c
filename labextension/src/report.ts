/**
 * The GPU-time report in a main-area tab: the server renders a
 * self-contained page (inline SVG, no scripts), shown in a sandboxed iframe.
 */
import { IFrame, MainAreaWidget, ToolbarButton } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { refreshIcon } from '@jupyterlab/ui-components';

export function createReportWidget(
  settings: ServerConnection.ISettings,
  trans: TranslationBundle
): MainAreaWidget<IFrame> {
  const frame = new IFrame({ sandbox: [] });
  const url = URLExt.join(
    settings.baseUrl,
    'jupyter-pause',
    'api',
    'report.html'
  );
  frame.url = url;
  const title = trans.__('GPU-Time Report');
  frame.node.querySelector('iframe')?.setAttribute('title', title);
  const widget = new MainAreaWidget({ content: frame });
  widget.id = 'jupyter-pause-report';
  widget.title.label = title;
  widget.title.closable = true;
  widget.addClass('jp-PauseReport');
  widget.toolbar.addItem(
    'refresh',
    new ToolbarButton({
      icon: refreshIcon,
      label: trans.__('Refresh'),
      tooltip: trans.__('Compute the report again, up to now'),
      onClick: () => {
        // a new URL: the iframe loads the page again
        frame.url = `${url}?t=${Date.now()}`;
      }
    })
  );
  return widget;
}
