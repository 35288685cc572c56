// A few DOM helpers: h() builds elements, the formatters say numbers the way an operator reads
// them.

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else if (name === 'class') element.className = value;
    else if (value === true) element.setAttribute(name, '');
    else element.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function formatNumber(n) {
  return n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US');
}

export function formatBytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined) return '–';
  const sign = ms < 0 ? '-' : '';
  ms = Math.abs(ms);
  if (ms < 1000) return `${sign}${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${sign}${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${sign}${m} min ${Math.floor(s % 60)} s`;
  return `${sign}${Math.floor(m / 60)} h ${m % 60} min`;
}

export function formatTime(ms) {
  return ms ? new Date(ms).toLocaleTimeString('en-GB', { hour12: false }) : '–';
}

// A page's message area: honest states instead of spinners.
export function notice(kind, text) {
  return h('div', { class: `notice notice-${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

// Asks before doing something that cannot be undone; resolves true if the operator confirmed.
export function confirmDialog(title, body, confirmLabel) {
  return new Promise((resolve) => {
    const dialog = h('dialog', { class: 'confirm', 'aria-labelledby': 'confirm-title' },
      h('h2', { id: 'confirm-title' }, title),
      h('p', {}, body),
      h('form', { method: 'dialog', class: 'actions' },
        h('button', { value: 'cancel', class: 'secondary', autofocus: true }, 'Cancel'),
        h('button', { value: 'confirm', class: 'danger' }, confirmLabel)));
    dialog.addEventListener('close', () => {
      resolve(dialog.returnValue === 'confirm');
      dialog.remove();
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

// Marks a table so that on a narrow screen each row becomes a block of "label: value" lines
// (style.css), each cell labelled with its column's heading.
export function stackable(table) {
  const headings = [...table.querySelectorAll('thead th')].map((th) => th.textContent);
  for (const row of table.querySelectorAll('tbody tr'))
    [...row.children].forEach((cell, i) => cell.setAttribute('data-label', headings[i] || ''));
  table.classList.add('stack');
  return table;
}
